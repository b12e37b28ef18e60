"""What nbval compares holds on another float path: every solution notebook, run a second time.

COURSE_DESIGN.md ("Anywhere"): the outputs nbval compares must hold on any CPU and thread
count. The plain suite runs nbval on ``solutions/`` along this machine's float path. Here nbval
runs every solution notebook again, in child processes whose float path differs from it:

* ``ATEN_CPU_CAPABILITY=default``: ATen's portable C++ kernels instead of the vectorised ones for
  this CPU's instruction set (AVX2, AVX-512, NEON, ...); they round in other places;
* ``MKL_CBWR=COMPATIBLE``: MKL's vendor-neutral code path instead of the one chosen for this CPU
  (an Intel and an AMD processor take different ones; ignored by a torch without MKL);
* ``OMP_NUM_THREADS=1`` where the plain run uses more threads (one per physical core, unless
  ``OMP_NUM_THREADS`` says otherwise), else 2: reductions are split differently, as on a machine
  with another core count.

A cell whose printed digits depend on the last bits of a float fails here with a fair
probability, so a fragile output is caught before another machine finds it. Found so far:
chapter 6 printed an entry that lies 1e-8 from a rounding boundary of its 4th decimal (now 3
decimals); chapter 8 compared two float32 results with ``torch.allclose``'s default
``atol=1e-8``, which fails on outputs close to 0 when a CPU rounds them differently (now
``atol=1e-6``; a rounding error there is about 1e-7); and chapter 8's 200-step training log
(now ``nbval-ignore-output``, checked with a tolerance in tests/test_notebook_results.py).

Cost: the child kernels run on one thread each, so the notebooks run side by side, one per core
(at most ``MAX_WORKERS``), the slowest first. On 2 cores (AMD EPYC, 2026-11-25) the nine
notebooks took 90 s one after the other on this path (76 s on the plain one) and 50-55 s side
by side, chapter 8 alone 36 s of it.
"""
import functools
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
MAX_WORKERS = 4
# Chapters by their time on the perturbed path, slowest first (bench/notebooks.py with this
# module's environment, 2 cores: 36, 19, 6.3, 6.1, 5.6, 4.8 s, the others about 4 s each).
SLOWEST_FIRST = ["08", "07", "02", "09", "06", "05"]
TIMEOUT = 900
PROBE = "import torch; print(torch.backends.cpu.get_cpu_capability(), torch.get_num_threads())"


@functools.cache
def _plain_probe() -> tuple:
    """(CPU capability, thread count) of a fresh torch in this environment: the plain run's."""
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    capability, threads = out.split()
    return capability, int(threads)


def _threads() -> int:
    """A thread count other than the plain run's (OMP_NUM_THREADS, else one per physical core)."""
    return 2 if _plain_probe()[1] == 1 else 1


def perturbed_env() -> dict:
    # Figures need the kernel's inline backend; the parent's PYTEST_ADDOPTS (a -k, say) is not
    # meant for the children.
    env = {k: v for k, v in os.environ.items() if k not in ("MPLBACKEND", "PYTEST_ADDOPTS")}
    # OMP_WAIT_POLICY=PASSIVE: an idle OpenMP thread sleeps instead of spinning, which changes no
    # arithmetic; two children of two threads each beside the suite's other worker otherwise spin
    # on 2 cores (this module: 212 s against 138 s with one busy process beside it, 2026-11-27).
    env.update(ATEN_CPU_CAPABILITY="default", MKL_CBWR="COMPATIBLE", OMP_NUM_THREADS=str(_threads()),
               OMP_WAIT_POLICY="PASSIVE")
    return env


def _run(notebook: Path, env: dict) -> tuple:
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "pytest", str(notebook.relative_to(ROOT)), "-p", "no:cacheprovider",
           "-q", "--no-header", "-rf", "--color=no"]
    try:
        result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT)
        status, output = result.returncode, result.stdout + result.stderr
    except subprocess.TimeoutExpired as error:
        status, output = "timeout", f"no result after {TIMEOUT} s\n{error.stdout or ''}"
    return status, output, time.perf_counter() - start


@pytest.fixture(scope="module")
def perturbed_runs(request):
    """nbval on every notebook selected in this session, side by side, on the perturbed path."""
    selected = {item.callspec.params["notebook"] for item in request.session.items
                if getattr(item, "module", None) is request.module           # nbval's items have none
                and "notebook" in getattr(getattr(item, "callspec", None), "params", {})}
    # Longest first, so that the workers finish together.
    order = sorted(selected, key=lambda p: (SLOWEST_FIRST.index(p.name[:2]) if p.name[:2] in SLOWEST_FIRST
                                            else len(SLOWEST_FIRST), p.name))
    workers = max(1, min(MAX_WORKERS, os.cpu_count() or 1, len(order)))
    env = perturbed_env()
    with ThreadPoolExecutor(workers) as pool:
        return dict(zip(order, pool.map(lambda notebook: _run(notebook, env), order)))


def test_the_perturbed_path_is_another_float_path():
    """The children really take ATen's portable kernels and another thread count."""
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True,
                         env=perturbed_env()).stdout
    capability, threads = out.split()
    # (On a CPU without vector kernels the plain run takes DEFAULT too; the thread count differs.)
    assert capability == "DEFAULT", out
    assert int(threads) != _plain_probe()[1], (out, _plain_probe())


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_solution_notebook_outputs_hold_on_another_float_path(notebook, perturbed_runs):
    status, output, seconds = perturbed_runs[notebook]
    if status != 0:
        failed = [line for line in output.splitlines() if line.startswith("FAILED")]
        pytest.fail(f"nbval of {notebook.name} under {' '.join(f'{k}={perturbed_env()[k]}' for k in ('ATEN_CPU_CAPABILITY', 'MKL_CBWR', 'OMP_NUM_THREADS'))} "
                    f"(exit {status}, {seconds:.0f} s): an output depends on the last bits of a float. "
                    "Print fewer digits, or tag the cell nbval-ignore-output and check its claim with "
                    "a tolerance in a test (AUTHORING.md).\n" + "\n".join(failed) + "\n\n" + output[-8000:],
                    pytrace=False)
