"""Cost of running a callable with the frame hook off: evalframe.without_hook vs a Python closure.

The closure is what compile_api wrapped each compiled graph in before without_hook existed:
set_callback(None) before the call and set_callback(previous) after, in a try/finally. Each
variant calls a 1-argument function that returns its argument, with a callback installed on
this thread that SKIPs every code object (so each call really turns the hook off and on
again, and the closure's own frame costs what a SKIPped frame costs), N times per run; the
figure is the median time per call, and what it adds to calling the function directly
(itself a SKIPped frame with the hook installed).

    python benchmarks/evalframe_without_hook.py [--repeats 9] [--calls 200000] [--clock process]

Needs only the evalframe package (no torch).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import evalframe


def payload(x: object) -> object:
    return x


def python_closure(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The wrapper compile_api used: the hook off around the call, in Python."""

    def run(*args: Any) -> Any:
        previous = evalframe.set_callback(None)
        try:
            return fn(*args)
        finally:
            evalframe.set_callback(previous)

    return run


def skip_everything(frame: object, cache_size: int) -> evalframe.Skip:
    # As compile_api's callback does for its own wrapper code: ask once, then SKIP.
    return evalframe.SKIP


def loop(fn: Callable[[object], object], n: int) -> None:
    for _ in range(n // 10):
        fn(1); fn(1); fn(1); fn(1); fn(1); fn(1); fn(1); fn(1); fn(1); fn(1)  # noqa: E702


def run_loop(fn: Callable[[object], object], n: int) -> Callable[[], None]:
    return lambda: loop(fn, n)


def timed(clock: Callable[[], float], fn: Callable[[], object]) -> float:
    gc.collect()
    start = clock()
    fn()
    return clock() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--clock", choices=["process", "wall"], default="process")
    args = parser.parse_args()
    clock = time.process_time if args.clock == "process" else time.perf_counter
    if not evalframe.HOOK_AVAILABLE:
        raise SystemExit(f"the hook is unavailable on Python {sys.version.split()[0]}")
    variants: dict[str, Callable[[object], object]] = {
        "direct call": payload,
        "Python closure": python_closure(payload),
        "without_hook": evalframe.without_hook(payload),
    }
    print(f"Python {sys.version.split()[0]}, clock={args.clock}, repeats={args.repeats}")
    times: dict[str, list[float]] = {name: [] for name in variants}
    previous = evalframe.set_callback(skip_everything)
    try:
        for name, fn in variants.items():
            # Warm-up, and a check that each variant returns the payload's result.
            assert fn(1) == 1, name
        for _ in range(args.repeats):  # interleaved: drift on the machine hits all alike
            for name, fn in variants.items():
                times[name].append(timed(clock, run_loop(fn, args.calls)))
    finally:
        evalframe.set_callback(previous)
    per_call = {name: statistics.median(ts) / args.calls * 1e9 for name, ts in times.items()}
    base = per_call["direct call"]
    for name, ns in per_call.items():
        added = "" if name == "direct call" else f", added {ns - base:.1f} ns/call"
        print(f"{name:>15}: {ns:.1f} ns/call{added}")
    print(
        f"without_hook saves {per_call['Python closure'] - per_call['without_hook']:.1f} ns "
        f"per call over the closure"
    )


if __name__ == "__main__":
    main()
