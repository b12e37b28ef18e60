"""How the suite (tests/, the solution notebooks, the toolkit page) is shared between workers."""
from pathlib import Path

import pytest

# `python3 tasks.py test` runs two pytest-xdist workers with --dist loadfile: each file runs whole
# on one worker, so a notebook's cells stay in order in one kernel and a module's fixtures are made
# once. The files that read the built sites form one unit, so that both editions are built once per
# run (their fixtures are per worker), not once per worker.
SITE_FILES = {"test_book.py", "test_site.py", "test_pdf.py"}


@pytest.hookimpl(optionalhook=True)   # pytest -p no:xdist still runs
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None  # any other mode: xdist's own scheduler
    from xdist.scheduler import LoadScopeScheduling

    class FilesAndBuiltSites(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "the built sites" if Path(path).name in SITE_FILES else path

    return FilesAndBuiltSites(config, log)


# The rerun of every solution notebook on another float path: one unit of about 160 s in CI.
LONG_FILES = SITE_FILES | {"test_portable_outputs.py"}


def _unit_rank(item) -> int:
    """Longest units first, so that neither worker is left with a long unit at the end: the built
    sites (both editions built, then read) and the perturbed rerun of the notebooks, then the
    solution notebooks, then everything else."""
    path = Path(str(item.fspath))
    if path.name in LONG_FILES:
        return 0
    if path.suffix == ".ipynb":
        return 1
    return 2


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    # A worker's own config says dist="no"; tell it the controller's mode.
    node.workerinput["course_dist"] = node.config.getvalue("dist")


def pytest_collection_modifyitems(config, items):
    dist = getattr(config, "workerinput", {}).get("course_dist", getattr(config.option, "dist", "no"))
    if dist != "loadfile":
        return
    # xdist hands out the units in the order of the collection when --no-loadscope-reorder is given
    # (tasks.py gives it; its default order, by number of tests, would start the sites last). The
    # sort is stable: the tests of one file keep their order.
    items.sort(key=_unit_rank)
