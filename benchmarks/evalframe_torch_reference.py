"""Reference for evalframe_overhead.py (a)/(a''): the cost of torch.compile's own eval-frame hook.

fib(27) with TorchDynamo's C hook installed (torch._C._dynamo.eval_frame.set_eval_frame)
and a callback that answers as Dynamo does for code it skips, vs no hook:

(t)  fib marked skip for its own frames (Dynamo's default answer: SKIP, callees DEFAULT);
(t'') fib marked skip recursively (SKIP, callees SKIP) -- Dynamo's counterpart of SKIP_RECURSIVE.

    python benchmarks/evalframe_torch_reference.py [--repeats 9] [--fib 27] [--clock process]

Uses torch only as the thing measured; Strata's implementation never calls it. Needs the
dev venv (torch installed); interleaved A/B runs, medians, process CPU time by default.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from torch._C._dynamo import eval_frame as dynamo_c  # the C hook only, no compilation
from torch._dynamo.types import ConvertFrameReturn


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def strategy(recursive: bool) -> Any:
    action = dynamo_c._FrameAction
    return dynamo_c._FrameExecStrategy(
        action.SKIP, action.SKIP if recursive else action.DEFAULT
    )


def skip_everything(frame: Any, cache_entry: Any, frame_state: Any) -> ConvertFrameReturn:
    # Dynamo's answer for code it will not compile: skip this code's frames from now on.
    return ConvertFrameReturn(frame_exec_strategy=strategy(False))


def skip_fib_recursively(frame: Any, cache_entry: Any, frame_state: Any) -> ConvertFrameReturn:
    return ConvertFrameReturn(frame_exec_strategy=strategy(frame.f_code is fib.__code__))


def timed(clock: Callable[[], float], fn: Callable[[], object]) -> float:
    gc.collect()
    start = clock()
    fn()
    return clock() - start


def ab(
    clock: Callable[[], float], repeats: int, n: int, callback: Callable[..., Any]
) -> tuple[float, float]:
    plain: list[float] = []
    hooked: list[float] = []
    dynamo_c.reset_code(fib.__code__)
    for _ in range(repeats):  # interleaved: drift on the machine hits both sides alike
        plain.append(timed(clock, lambda: fib(n)))
        dynamo_c.set_eval_frame(callback)
        try:
            hooked.append(timed(clock, lambda: fib(n)))
        finally:
            dynamo_c.set_eval_frame(None)
    dynamo_c.reset_code(fib.__code__)
    return statistics.median(plain), statistics.median(hooked)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--fib", type=int, default=27)
    parser.add_argument("--clock", choices=["process", "wall"], default="process")
    args = parser.parse_args()
    clock = time.process_time if args.clock == "process" else time.perf_counter
    import torch

    print(
        f"Python {sys.version.split()[0]}, torch {torch.__version__}, clock={args.clock}, "
        f"repeats={args.repeats}"
    )
    for label, callback in [
        ("(t) TorchDynamo's hook, fib skipped (callees hooked)", skip_everything),
        ("(t'') TorchDynamo's hook, fib skipped recursively", skip_fib_recursively),
    ]:
        p, h = ab(clock, args.repeats, args.fib, callback)
        print(
            f"{label}: plain {p * 1e3:.1f} ms, hooked {h * 1e3:.1f} ms, "
            f"{100 * (h / p - 1):+.1f}%"
        )


if __name__ == "__main__":
    main()
