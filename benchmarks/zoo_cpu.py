"""The zoo (``benchmarks/zoo/models.py``) on CPU for issue #21: eager, Strata and torch inductor
in one process, timed interleaved with the process CPU clock.

``zoo_bench.py`` times each compiler in its own block with the wall clock, which on a loaded shared
machine moves the ratios by more than the code does. Here, per zoo case: eager, Strata
(``compile_api.compile``, default backend inductor_lite) and ``torch.compile`` (inductor); both
with a fresh on-disk cache (cold compiles, unless ``STRATA_CACHE_DIR`` /
``TORCHINDUCTOR_CACHE_DIR`` are set) run on identical fresh builds; the compile time is the first
call's wall time, after each compiler's one-time setup in this process (``_warm_up``: imports, and
Strata's C++ guard and kernel-call extensions, which a fresh cache folder would otherwise rebuild
inside the first model's compile; ``--cold`` leaves it out); then the three steps alternate for
``--reps`` rounds and each speedup is eager's median process time over the compiler's. The error
column is each compiler's worst output tensor (``infer``) or worst gradient/buffer (``train``)
against eager, relative to that tensor's largest value; for ``train`` also against the same step in
float64 (eager's own error beside it), which is what "gradients within torch inductor's error"
compares.

    python benchmarks/zoo_cpu.py --only resnet18,gpt2 [--modes infer,train] [--reps 9] [--threads 2]

``--outside`` measures, instead of the zoo, the models of ``model_sweep.py`` (outside the zoo,
never tuned against; see ``benchmarks/zoo/outside.py``).

Both compilers generate kernels for the thread count in force when they compile
(``torch.set_num_threads``), so each ``--threads`` is its own process; the "load" column is
the 1-minute load average when the case started (the machine is shared).

Process CPU time adds up every thread's time (an OpenMP thread spinning at a barrier counts), so
it measures work, not latency, once ``--threads`` is above 1: there ``--clock wall`` (the wall
clock) is the measure, on a machine quiet enough for it. On a machine of many idle cores,
``--jobs N`` runs N cases at once, each in its own process pinned to its own ``--threads`` cores
(``os.sched_setaffinity``), and prints each row when its case ends.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Fresh on-disk caches for both compilers: both compile times are cold compiles.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="zoo-cpu-inductor-"))
os.environ.setdefault("STRATA_CACHE_DIR", tempfile.mkdtemp(prefix="zoo-cpu-strata-"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks.zoo.models import Built, Case, iter_cases, make_step  # noqa: E402
from benchmarks.zoo.outside import outside_cases  # noqa: E402


def _worst(got: list[torch.Tensor], ref: list[torch.Tensor]) -> float:
    """The worst tensor's max error relative to its largest reference value. A tensor whose
    largest value is under a millionth of the step's largest (a gradient that is zero in exact
    arithmetic, e.g. attention's key bias) is measured against that millionth instead, as in
    tests/zoo/test_zoo_gradient_numerics.py."""
    floor = 1e-6 * max((r.double().abs().max().item() for r in ref if r.numel()), default=0.0)
    worst = 0.0
    for g, r in zip(got, ref, strict=True):
        if not r.is_floating_point() or r.numel() == 0:
            continue
        scale = max(r.double().abs().max().item(), floor, 1e-30)
        worst = max(worst, (g.double() - r.double()).abs().max().item() / scale)
    return worst


def _double(built: Built) -> Built:
    built.model.double()

    def conv(v: Any) -> Any:
        return v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v

    built.kwargs = {k: conv(v) for k, v in built.kwargs.items()}
    return built


def _compilers() -> dict[str, Callable[[torch.nn.Module], Callable[..., Any]] | None]:
    import compile_api

    return {
        "eager": None,
        "strata": lambda m: compile_api.compile(m),
        "torch": lambda m: torch.compile(m, backend="inductor"),
    }


def _warm_up() -> str:
    """Compile a small function forward and backward with both compilers, so that what each
    does once per process or per cache folder is not counted in the first model's compile."""
    import compile_api

    def f(x: torch.Tensor) -> torch.Tensor:
        return (torch.relu(x) * 2 + 1).sum()

    spent = []
    for fn in (compile_api.compile(f), torch.compile(f, backend="inductor")):
        start = time.perf_counter()
        fn(torch.randn(8, 8))
        fn(torch.randn(8, 8, requires_grad=True)).backward()
        spent.append(time.perf_counter() - start)
    compile_api.reset()
    torch.compiler.reset()
    return f"one-time setup: Strata {spent[0]:.1f} s, torch {spent[1]:.1f} s"


def measure(
    case: Case, reps: int, clock: Callable[[], float] = time.process_time
) -> dict[str, Any]:
    import compile_api

    torch.compiler.reset()
    compile_api.reset()
    row: dict[str, Any] = {"case": case.name, "load": os.getloadavg()[0]}
    steps: dict[str, Callable[[], list[torch.Tensor]]] = {}
    results: dict[str, list[torch.Tensor]] = {}
    for who, fn in _compilers().items():
        step = make_step(case, case.model.build(), fn)
        start = time.perf_counter()
        try:
            results[who] = [t.detach().clone() for t in step()]
        except Exception as e:  # a failing compiler is a row, not the end of the run
            row[f"{who}_note"] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
            continue
        row[f"{who}_compile_s"] = time.perf_counter() - start
        steps[who] = step
    for who in ("strata", "torch"):
        if who in results:
            row[f"{who}_err"] = _worst(results[who], results["eager"])
    if case.mode == "train":
        try:
            exact = make_step(case, _double(case.model.build()), None)()
        except RuntimeError as e:  # an op without float64 (mixtral's grouped_mm)
            row["eager_note"] = f"no float64 step: {str(e).splitlines()[0][:60]}"
        else:
            for who, got in results.items():
                row[f"{who}_err64"] = _worst(got, exact)
    times: dict[str, list[float]] = {k: [] for k in steps}
    for step in steps.values():
        step()
    for _ in range(reps):
        for who, step in steps.items():
            t0 = clock()
            step()
            times[who].append(clock() - t0)
    eager = statistics.median(times["eager"])
    row["eager_ms"] = 1e3 * eager
    for who in ("strata", "torch"):
        if who in times:
            row[f"{who}_x"] = eager / statistics.median(times[who])
    return row


def _cases(args: argparse.Namespace) -> list[Case]:
    """The cases asked for: the zoo's, or with ``--outside`` the models outside it."""
    only = [n for n in args.only.split(",") if n]
    modes = set(args.modes.split(","))
    pool = (
        [c for c in outside_cases() if not only or c.name in only or c.model.name in only]
        if args.outside
        else list(iter_cases(only or None))
    )
    return [c for c in pool if c.mode in modes]


def _cell(row: dict[str, Any], key: str, fmt: str) -> str:
    value = row.get(key)
    return "-" if value is None else format(value, fmt)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="models or cases, comma-separated")
    parser.add_argument("--modes", default="infer", help="infer,train")
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cold", action="store_true", help="no one-time setup before timing")
    parser.add_argument(
        "--outside", action="store_true", help="models outside the zoo (model_sweep.py's)"
    )
    parser.add_argument("--clock", choices=("process", "wall"), default="process")
    parser.add_argument(
        "--jobs", type=int, default=0, help="cases at once, one pinned process each"
    )
    args = parser.parse_args(argv)
    if args.jobs:
        return _run_jobs(args, argv if argv is not None else sys.argv[1:])
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    if not args.cold:
        print(_warm_up(), file=sys.stderr, flush=True)
    print(
        "| case | threads | load | eager ms | Strata x | torch x | compile s Strata / torch "
        "| err vs eager Strata / torch | grad err vs float64 eager / Strata / torch | note |"
    )
    print("|" + "---|" * 10)
    for case in _cases(args):
        clock = time.process_time if args.clock == "process" else time.perf_counter
        r = measure(case, args.reps, clock)
        print(
            f"| {r['case']} | {args.threads} | {r['load']:.1f} "
            f"| {_cell(r, 'eager_ms', '.2f')} | {_cell(r, 'strata_x', '.2f')} "
            f"| {_cell(r, 'torch_x', '.2f')} "
            f"| {_cell(r, 'strata_compile_s', '.1f')} / {_cell(r, 'torch_compile_s', '.1f')} "
            f"| {_cell(r, 'strata_err', '.1e')} / {_cell(r, 'torch_err', '.1e')} "
            f"| {_cell(r, 'eager_err64', '.1e')} / {_cell(r, 'strata_err64', '.1e')} / "
            f"{_cell(r, 'torch_err64', '.1e')} "
            f"| {r.get('strata_note') or r.get('torch_note') or r.get('eager_note', '')} |",
            flush=True,
        )
    return 0


def _run_jobs(args: argparse.Namespace, argv: list[str]) -> int:
    """Each case in a child process of this script pinned to ``--threads`` cores of its own,
    ``--jobs`` at a time; each row is printed when its case ends (a run cut short keeps the
    rows it finished)."""
    cases = [c.name for c in _cases(args)]
    cores = sorted(os.sched_getaffinity(0))
    slots = [cores[i * args.threads : (i + 1) * args.threads] for i in range(args.jobs)]
    if any(len(s) < args.threads for s in slots):
        raise SystemExit(f"--jobs {args.jobs} x --threads {args.threads}: only {len(cores)} cores")
    rest = _without(argv, {"--jobs", "--only"})
    pending = list(cases)
    running: dict[int, tuple[str, subprocess.Popen[str]]] = {}
    print(
        "| case | threads | load | eager ms | Strata x | torch x | compile s Strata / torch "
        "| err vs eager Strata / torch | grad err vs float64 eager / Strata / torch | note |"
    )
    print("|" + "---|" * 10, flush=True)
    while pending or running:
        free = [i for i in range(args.jobs) if i not in running]
        while pending and free:
            slot = free.pop()
            name = pending.pop(0)
            proc = subprocess.Popen(
                [sys.executable, __file__, "--only", name, *rest],
                stdout=subprocess.PIPE,
                text=True,
                preexec_fn=functools.partial(os.sched_setaffinity, 0, slots[slot]),
            )
            running[slot] = (name, proc)
        time.sleep(1)
        for slot, (name, proc) in list(running.items()):
            if proc.poll() is not None:
                text = proc.stdout.read() if proc.stdout else ""
                rows = [r for r in text.splitlines() if r.startswith("| ") and "---" not in r]
                print("\n".join(rows[1:]) or f"| {name} | exit {proc.returncode} |", flush=True)
                del running[slot]
    return 0


def _without(argv: list[str], flags: set[str]) -> list[str]:
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in flags:
            skip = True
            continue
        if arg.split("=", 1)[0] in flags:
            continue
        kept.append(arg)
    return kept


if __name__ == "__main__":
    sys.exit(main())
