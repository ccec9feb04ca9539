"""The model zoo side by side: Strata vs torch.compile on real transformers/torchvision/timm models.

``python benchmarks/zoo_bench.py`` runs a small default set (``DEFAULT_CASES``: tiny configs,
CPU, 1 thread, a few minutes); ``--only gpt2,resnet18-train`` picks models or cases, ``--all``
runs every case of ``--modes`` (default infer,train), ``--backend`` (default aot_eager;
``inductor`` for code-generation speedups, much slower to compile).

Per case (``benchmarks/zoo/models.py``), in one process: graphs and breaks of Strata and of
torch.compile (same backend, counted by a wrapping backend), whether each result matches eager,
the compile time (the first call, capture and backend compile included) and the steady-state
speedup over eager (median of ``--repeats`` samples). A case Strata fails on says why in the
last column; torch's inductor gets a fresh on-disk cache, so both compile times are cold.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

# A fresh inductor cache: torch's compile times are cold compiles, like Strata's.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="zoo-inductor-"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks.zoo.measure import (  # noqa: E402
    _Counting,
    assert_matches,
    counting_torch_breaks,
)
from benchmarks.zoo.models import Case, iter_cases, make_step  # noqa: E402

# The default set: a transformer decoder and encoder, a Llama, a CNN of each library and a
# ViT in inference; one language model and one CNN in training.
DEFAULT_CASES = (
    "gpt2-infer",
    "bert-infer",
    "llama-infer",
    "resnet18-infer",
    "mobilenetv3-infer",
    "vit_tiny-infer",
    "gpt2-train",
    "resnet18-train",
)


def _timed(step: Callable[[], Any], repeats: int, warmup: int) -> float:
    for _ in range(warmup):
        step()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


Compiler = tuple[Callable[[bool | None], Callable[[Any], Any]], Callable[[], tuple[int, int]]]


def _strata(backend: str, stack: contextlib.ExitStack) -> Compiler:
    import compile_api
    from compile_api.state import state

    compile_api.reset()
    counting = _Counting(compile_api.lookup_backend(backend))

    def counts() -> tuple[int, int]:
        with state.lock:
            return len(counting.graphs), sum(len(r.breaks) for r in state.records)

    def compiler(dynamic: bool | None) -> Callable[[Any], Any]:
        return lambda m: compile_api.compile(m, backend=counting, dynamic=dynamic)

    return compiler, counts


def _torch(backend: str, stack: contextlib.ExitStack) -> Compiler:
    import torch._dynamo

    torch._dynamo.reset()
    counting = _Counting(torch._dynamo.lookup_backend(backend))
    # One per frame that broke, as Strata's records count them.
    reasons = stack.enter_context(counting_torch_breaks())

    def counts() -> tuple[int, int]:
        return len(counting.graphs), len(reasons)

    def compiler(dynamic: bool | None) -> Callable[[Any], Any]:
        return lambda m: torch.compile(m, backend=counting, dynamic=dynamic)

    return compiler, counts


def measure(case: Case, backend: str, repeats: int, warmup: int) -> dict[str, Any]:
    """One row: eager time, then each compiler's counts, correctness, compile time, speedup."""
    expected = make_step(case, case.model.build(), None)()
    eager_s = _timed(make_step(case, case.model.build(), None), repeats, warmup)
    row: dict[str, Any] = {"case": case.name, "eager_ms": 1000 * eager_s}
    dynamic = True if case.mode == "dynamic" else None
    for who, make in (("strata", _strata), ("torch", _torch)):
        stack = contextlib.ExitStack()
        try:
            compiler, counts = make(backend, stack)
            step = make_step(case, case.model.build(), compiler(dynamic))
            start = time.perf_counter()
            got = step()
            row[f"{who}_compile_s"] = time.perf_counter() - start
            try:
                assert_matches(got, expected, backend)
                row[f"{who}_ok"] = "yes"
            except AssertionError as e:
                row[f"{who}_ok"] = "WRONG"
                row[f"{who}_note"] = str(e).splitlines()[0][:80]
            row[f"{who}_graphs"], row[f"{who}_breaks"] = counts()
            row[f"{who}_speedup"] = eager_s / _timed(step, repeats, warmup)
        except Exception as e:  # a failing case is a row, not the end of the run
            row[f"{who}_ok"] = "FAILED"
            row[f"{who}_note"] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
            if os.environ.get("ZOO_BENCH_TRACEBACK"):
                traceback.print_exc()
        finally:
            stack.close()
    return row


def _cell(row: dict[str, Any], key: str, fmt: str) -> str:
    value = row.get(key)
    return "-" if value is None else format(value, fmt)


def table(rows: list[dict[str, Any]], backend: str) -> str:
    head = (
        "| case | graphs ours / torch | breaks ours / torch | correct ours / torch | "
        f"speedup vs eager ours / torch ({backend}) | compile s ours / torch | eager ms | note |"
    )
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        note = r.get("strata_note") or r.get("torch_note", "")
        lines.append(
            f"| {r['case']} | {_cell(r, 'strata_graphs', 'd')} / {_cell(r, 'torch_graphs', 'd')} "
            f"| {_cell(r, 'strata_breaks', 'd')} / {_cell(r, 'torch_breaks', 'd')} "
            f"| {r.get('strata_ok', '-')} / {r.get('torch_ok', '-')} "
            f"| {_cell(r, 'strata_speedup', '.2f')}x / {_cell(r, 'torch_speedup', '.2f')}x "
            f"| {_cell(r, 'strata_compile_s', '.1f')} / {_cell(r, 'torch_compile_s', '.1f')} "
            f"| {_cell(r, 'eager_ms', '.2f')} | {note} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="models or cases, comma-separated")
    parser.add_argument("--all", action="store_true", help="every case of --modes")
    parser.add_argument(
        "--modes", default="infer,train",
        help="infer,train,dynamic,generate,generate_hf,generate_static",
    )
    # aot_eager by default: a cold inductor compile of one tiny model took torch 467 s on the
    # shared 2-core machine, too long for a default run; --backend inductor for speed figures.
    parser.add_argument("--backend", default="aot_eager", help="eager, aot_eager or inductor")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (0: keep)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    modes = set(args.modes.split(","))
    names = [n for n in args.only.split(",") if n] or (None if args.all else list(DEFAULT_CASES))
    rows = []
    for case in iter_cases(names):
        if case.mode not in modes:
            continue
        start = time.perf_counter()
        rows.append(measure(case, args.backend, args.repeats, args.warmup))
        # The row as it comes, so a run cut short still says what it measured.
        print(
            f"{case.name} ({time.perf_counter() - start:.0f} s): {rows[-1]}",
            file=sys.stderr,
            flush=True,
        )
    print(table(rows, args.backend))
    return 0


if __name__ == "__main__":
    sys.exit(main())
