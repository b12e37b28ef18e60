"""The rule of tests/exercises/ (its conftest): every test there carries the label of the
exercise it tests, of its file's chapter. Shown here on a temporary copy of the folder, with
the same conftest, a labelled test file and one deliberately broken test at a time."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUARD = ROOT / "tests" / "exercises" / "conftest.py"

LABELLED = '''import pytest


def test_ch06_ex3_labelled():
    pass


@pytest.mark.parametrize("label", ["ch06_ex2", "ch06_ex4"])
def test_ch06_several(label):
    pass
'''


def _collect(tmp_path, files, *args):
    folder = tmp_path / "exercises"
    folder.mkdir()
    shutil.copy(GUARD, folder / "conftest.py")
    for name, source in files.items():
        (folder / name).write_text(source)
    # Without the installed plugins (nbval and the like), which only slow the start down.
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", PYTHONPATH=path)
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                             *args, str(folder)], cwd=tmp_path, env=env, capture_output=True, text=True)
    return result.returncode, result.stdout + result.stderr


def test_labelled_tests_are_collected(tmp_path):
    code, out = _collect(tmp_path, {"test_ch06.py": LABELLED})
    assert code == 0, out
    assert "3 tests collected" in out, out


@pytest.mark.parametrize("files,args,said", [
    ({"test_ch06.py": LABELLED + "\n\ndef test_something_unlabelled():\n    pass\n"}, (),
     "test_ch06.py::test_something_unlabelled carries no chNN_exM label"),
    ({"test_ch06.py": LABELLED + "\n\ndef test_something_unlabelled():\n    pass\n"}, ("-k", "ch06_ex3"),
     "test_ch06.py::test_something_unlabelled carries no chNN_exM label"),
    ({"test_ch06.py": LABELLED + "\n\n@pytest.mark.parametrize('x', [1, 2])\ndef test_ch06_p(x):\n    pass\n"}, (),
     "test_ch06.py::test_ch06_p[1] carries no chNN_exM label"),
    ({"test_ch06.py": "def test_ch05_ex3_in_the_wrong_file():\n    pass\n"}, (),
     "carries ch05_ex3, no label of chapter 06"),
    ({"test_ch06.py": "def test_ch06_ex9_no_such_exercise():\n    pass\n"}, (),
     "carries ch06_ex9, which no exercise registers"),
    ({"test_ch06.py": LABELLED, "test_findings.py": "def test_ch06_ex3_x():\n    pass\n"}, (),
     "test_findings.py::test_ch06_ex3_x is in test_findings.py, not in a test_chNN.py file"),
], ids=["unlabelled", "unlabelled, deselected by -k", "parametrized ids without label", "another chapter",
        "no such exercise", "a file not by chapter"])
def test_a_test_without_its_label_stops_the_collection(tmp_path, files, args, said):
    code, out = _collect(tmp_path, files, *args)
    assert code == pytest.ExitCode.USAGE_ERROR, out
    assert said in out, out
    assert "labelled with the exercise they test" in out, out
