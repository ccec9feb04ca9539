"""evalframe's overhead, as two interleaved A/B measurements (medians of repeats).

(a) fib(27) with the hook installed on code it SKIPs, vs no hook (target <= 5% slower).
(a') the same with a do-nothing eval-frame function (CPython's own cost of any hook).
(a'') the same with fib marked SKIP_RECURSIVE (its calls run with the hook off).
(b) cache-hit dispatch: a 1-argument function whose single entry's guard returns True,
    called 1M times, vs the same function unhooked (target <= 150 ns added per call).

    python benchmarks/evalframe_overhead.py [--repeats 7] [--calls 1000000] [--clock process]

Needs only the evalframe package (no torch). The clock defaults to this process's CPU
time, which a shared machine disturbs less than wall time; `--clock wall` measures
elapsed time.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import types
from collections.abc import Callable

import evalframe
from evalframe import _evalframe


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def one_arg(x: object) -> object:
    return x


def one_arg_entry_code(x: object) -> object:
    return x


def guard_true(f_locals: dict[str, object]) -> bool:
    return True


def skip_everything(frame: object, cache_size: int) -> evalframe.Skip:
    return evalframe.SKIP


def skip_fib_recursively(frame: types.FrameType, cache_size: int) -> evalframe.Skip:
    # Only fib's frames (and all they call) run unhooked; the harness's frames are SKIPped.
    return evalframe.SKIP_RECURSIVE if frame.f_code is fib.__code__ else evalframe.SKIP


def compile_one_arg(frame, cache_size):  # type: ignore[no-untyped-def]
    if frame.f_code is one_arg.__code__:
        return evalframe.Entry(guard_true, one_arg_entry_code.__code__)
    return evalframe.SKIP


def call_many(n: int) -> None:
    f = one_arg
    for _ in range(n // 10):
        f(1); f(1); f(1); f(1); f(1); f(1); f(1); f(1); f(1); f(1)  # noqa: E702


def call_many_baseline_loop(n: int) -> None:
    # The same loop without the calls: subtracted so per-call figures count calls only.
    for _ in range(n // 10):
        pass


def timed(clock: Callable[[], float], fn: Callable[[], object]) -> float:
    gc.collect()
    start = clock()
    fn()
    return clock() - start


def ab(
    label: str,
    clock: Callable[[], float],
    repeats: int,
    run: Callable[[], object],
    callback: evalframe.Callback,
) -> tuple[list[float], list[float]]:
    plain: list[float] = []
    hooked: list[float] = []
    for _ in range(repeats):  # interleaved: drift on the machine hits both sides alike
        plain.append(timed(clock, run))
        evalframe.set_callback(callback)
        try:
            hooked.append(timed(clock, run))
        finally:
            evalframe.set_callback(None)
    print(f"{label}: plain {[round(t, 4) for t in plain]}", file=sys.stderr)
    print(f"{label}: hooked {[round(t, 4) for t in hooked]}", file=sys.stderr)
    return plain, hooked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--fib", type=int, default=27)
    parser.add_argument("--clock", choices=["process", "wall"], default="process")
    args = parser.parse_args()
    clock = time.process_time if args.clock == "process" else time.perf_counter
    if not evalframe.HOOK_AVAILABLE:
        raise SystemExit(f"the hook is unavailable on Python {sys.version.split()[0]}")
    print(f"Python {sys.version.split()[0]}, clock={args.clock}, repeats={args.repeats}")

    # Warm up both paths once (the first hooked run marks fib SKIP / caches the entry).
    fib(20)
    evalframe.set_callback(skip_everything)
    fib(20)
    evalframe.set_callback(None)

    plain, hooked = ab(
        f"fib({args.fib})", clock, args.repeats, lambda: fib(args.fib), skip_everything
    )
    p, h = statistics.median(plain), statistics.median(hooked)
    print(
        f"(a) fib({args.fib}), hook installed on SKIPped code: plain {p * 1e3:.1f} ms, "
        f"hooked {h * 1e3:.1f} ms, {100 * (h / p - 1):+.1f}% (target <= +5%)"
    )
    # Reference: any installed eval-frame function, even one that only calls the
    # default evaluator, stops CPython inlining Python-to-Python calls.
    _evalframe._set_passthrough(True)
    try:
        plain, hooked = ab(
            f"fib({args.fib}) pass-through", clock, args.repeats, lambda: fib(args.fib),
            skip_everything,
        )
    finally:
        _evalframe._set_passthrough(False)
    p, h = statistics.median(plain), statistics.median(hooked)
    print(
        f"(a') fib({args.fib}), a do-nothing eval-frame function installed: plain "
        f"{p * 1e3:.1f} ms, hooked {h * 1e3:.1f} ms, {100 * (h / p - 1):+.1f}% (CPython's own cost)"
    )

    evalframe.clear_cache()  # fib is asked again, and marked SKIP_RECURSIVE this time
    plain, hooked = ab(
        f"fib({args.fib}) SKIP_RECURSIVE", clock, args.repeats, lambda: fib(args.fib),
        skip_fib_recursively,
    )
    p, h = statistics.median(plain), statistics.median(hooked)
    print(
        f"(a'') fib({args.fib}), hook installed, fib marked SKIP_RECURSIVE: plain "
        f"{p * 1e3:.1f} ms, hooked {h * 1e3:.1f} ms, {100 * (h / p - 1):+.1f}% (target <= +5%)"
    )
    evalframe.clear_cache()

    evalframe.set_callback(compile_one_arg)
    one_arg(1)  # caches the single entry
    evalframe.set_callback(None)
    assert len(evalframe.cache_entries(one_arg.__code__)) == 1
    plain, hooked = ab(
        f"{args.calls} calls", clock, args.repeats, lambda: call_many(args.calls), compile_one_arg
    )
    loop = statistics.median(
        timed(clock, lambda: call_many_baseline_loop(args.calls)) for _ in range(args.repeats)
    )
    p, h = statistics.median(plain), statistics.median(hooked)
    per_plain = (p - loop) / args.calls * 1e9
    per_hooked = (h - loop) / args.calls * 1e9
    print(
        f"(b) cache-hit dispatch, 1-arg function, {args.calls} calls: plain {per_plain:.1f} "
        f"ns/call, hooked {per_hooked:.1f} ns/call, added {per_hooked - per_plain:.1f} ns/call "
        f"(target <= 150 ns)"
    )
    evalframe.clear_cache()


if __name__ == "__main__":
    main()
