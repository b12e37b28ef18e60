"""How the suite (tests/, the solution notebooks, the toolkit page) is shared between workers."""
from pathlib import Path

# `python3 tasks.py test` runs two pytest-xdist workers with --dist loadfile: each file runs whole
# on one worker, so a notebook's cells stay in order in one kernel and a module's fixtures are made
# once. The files that read the built sites form one unit, so that both editions are built once per
# run (their fixtures are per worker), not once per worker.
SITE_FILES = {"test_book.py", "test_site.py", "test_pdf.py"}


def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None  # any other mode: xdist's own scheduler
    from xdist.scheduler import LoadScopeScheduling

    class FilesAndBuiltSites(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "the built sites" if Path(path).name in SITE_FILES else path

    return FilesAndBuiltSites(config, log)
