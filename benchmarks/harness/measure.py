"""Runs one workload under several implementations in one process, interleaved, and measures them.

Order of events for a workload:
1. build one instance per implementation (identical parameters and inputs, from the same seed);
2. compile() and the first call of each, timed together: the compile time (both compilers'
   modules are imported before, so it times tracing, compiling and one run, and the first
   compiler in the process does not pay shared imports for both); its output (and state) is
   compared with eager's;
3. ``warmup`` rounds of one call each, round-robin;
4. ``repeats`` rounds; in each, every implementation takes one sample of ``calls`` calls, in an
   order rotated every round so no implementation always runs first;
5. on CUDA, one more call per implementation with the peak-memory counter reset;
6. graph counts.
Any exception in an implementation marks it FAILED at that stage, with its first line, and the
others carry on; nothing in here raises out of ``run_workload``.
"""

from __future__ import annotations

import logging
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch.utils._pytree import tree_flatten
from workloads import INFERENCE, OVERHEAD, Instance, Workload

from .impls import Impl, first_line

log = logging.getLogger("strata.benchmarks")

OK = "ok"
FAILED = "FAILED"


@dataclass
class Settings:
    """How long and how carefully to measure."""

    device: str = "cpu"
    repeats: int = 10
    warmup: int = 3
    min_sample_s: float = 0.05
    quick: bool = False
    # "wall": elapsed time (what a user waits). "process": this process's CPU time, all threads
    # together -- far less sensitive to other processes on a shared machine, but it counts the
    # work of every thread rather than the latency, and it misses time spent on a GPU.
    clock: str = "wall"


@dataclass
class Result:
    """Everything measured for one workload under one implementation (times in seconds per call)."""

    workload: str
    kind: str
    impl: str
    status: str = OK
    error: str | None = None
    stage: str | None = None
    compile_s: float | None = None
    median_s: float | None = None
    p25_s: float | None = None
    p75_s: float | None = None
    min_s: float | None = None
    max_s: float | None = None
    calls_per_sample: int | None = None
    samples_s: list[float] = field(default_factory=list)
    wall_samples_s: list[float] = field(default_factory=list)
    cpu_samples_s: list[float] = field(default_factory=list)
    clock: str = "wall"
    speedup: float | None = None
    overhead_us: float | None = None
    correct: bool | None = None
    max_abs_diff: float | None = None
    correctness_note: str | None = None
    tolerance: str = ""
    graphs: int | None = None
    graph_breaks: int | None = None
    counts_note: str = ""
    peak_mem_bytes: int | None = None
    note: str = ""
    # Warnings logged (or warned) while this implementation compiled and ran its first call: how a
    # compiler that quietly falls back to eager shows itself.
    warning_count: int = 0
    warnings: list[str] = field(default_factory=list)


class _Runner:
    """One implementation's live state while its workload runs."""

    def __init__(self, impl: Impl, name: str, result: Result) -> None:
        self.impl = impl
        self.name = name
        self.result = result
        self.instance: Instance | None = None
        self.call: Callable[..., Any] | None = None
        self.first_output: list[Any] = []

    def fail(self, stage: str, exc: BaseException) -> None:
        self.result.status = FAILED
        self.result.stage = stage
        self.result.error = first_line(exc)
        log.info("%s/%s failed at %s", self.result.workload, self.name, stage, exc_info=exc)

    @property
    def alive(self) -> bool:
        return self.result.status == OK

    def call_once(self) -> object:
        assert self.call is not None and self.instance is not None
        return self.call(*self.instance.args)

    def take_sample(self, calls: int, device: torch.device, clock: str) -> None:
        assert self.call is not None and self.instance is not None
        wall, cpu = _time_sample(self.call, self.instance.args, calls, device)
        self.result.wall_samples_s.append(wall)
        self.result.cpu_samples_s.append(cpu)
        self.result.samples_s.append(cpu if clock == "process" else wall)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _grad_mode(workload: Workload) -> AbstractContextManager[Any]:
    # Inference workloads run under no_grad, as inference is deployed; training steps need autograd.
    if workload.kind in (INFERENCE, OVERHEAD):
        return torch.no_grad()
    return nullcontext()


def _snapshot(output: Any, instance: Instance) -> list[Any]:
    """The first call's output leaves and the instance's state, copied so later calls keep them."""
    leaves, _ = tree_flatten(output)
    leaves = [*leaves, *instance.state()]
    return [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in leaves]


def compare(expected: Sequence[Any], actual: Sequence[Any], rtol: float, atol: float,
            ) -> tuple[bool, float | None, str]:
    """Whether ``actual`` matches ``expected`` leaf by leaf: (ok, largest abs difference, note)."""
    if len(expected) != len(actual):
        return False, None, f"{len(actual)} outputs, eager has {len(expected)}"
    worst = 0.0
    ok = True
    notes: list[str] = []
    for i, (exp, act) in enumerate(zip(expected, actual)):
        if isinstance(exp, torch.Tensor) != isinstance(act, torch.Tensor):
            kinds = f"{type(act).__name__}, eager gives {type(exp).__name__}"
            return False, None, f"output {i}: {kinds}"
        if not isinstance(exp, torch.Tensor):
            if exp != act:
                ok = False
                notes.append(f"output {i}: {act!r} != {exp!r}")
            continue
        if exp.shape != act.shape or exp.dtype != act.dtype:
            return False, None, (f"output {i}: {act.dtype}{list(act.shape)}, "
                                 f"eager gives {exp.dtype}{list(exp.shape)}")
        exp_f, act_f = exp.detach().double().cpu(), act.detach().double().cpu()
        if exp_f.numel():
            diff = (exp_f - act_f).abs()
            # NaN where eager has NaN counts as equal; anywhere else it is a difference.
            both_nan = exp_f.isnan() & act_f.isnan()
            diff = torch.where(both_nan, torch.zeros_like(diff), diff)
            if diff.isnan().any():
                worst = float("nan")
            elif worst == worst:
                worst = max(worst, float(diff.max()))
        if not torch.allclose(act_f, exp_f, rtol=rtol, atol=atol, equal_nan=True):
            ok = False
            notes.append(f"output {i} differs")
    return ok, worst, "; ".join(notes[:3])


def _time_sample(call: Callable[..., Any], args: tuple[Any, ...], calls: int,
                 device: torch.device) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) per call, over ``calls`` back-to-back calls."""
    _sync(device)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        call(*args)
    _sync(device)
    return (time.perf_counter() - wall) / calls, (time.process_time() - cpu) / calls


def _calls_per_sample(workload: Workload, settings: Settings, eager: _Runner | None,
                      device: torch.device) -> int:
    fixed = workload.quick_calls_per_sample if settings.quick else workload.calls_per_sample
    if fixed is not None:
        return fixed
    probe = eager if eager is not None and eager.alive else None
    if probe is None or probe.call is None or probe.instance is None:
        return 1
    # One warm call of eager sets the sample length for every implementation of this workload.
    per_call = _time_sample(probe.call, probe.instance.args, 1, device)[0]
    return max(1, int(settings.min_sample_s / max(per_call, 1e-9)))


def _warm_shared_imports(device: torch.device) -> None:
    """Import, once, the modules both compilers load on their first compile, before any timing.

    Compile time then measures tracing, compiling and the first run, not module imports: a
    ShapeEnv imports torch's own compiler configuration and, through it, triton (whichever
    compiler ran first in the process would pay those seconds for both); torch.compile loads
    its inductor on the first call and Strata its backend and aot there, each imported here.
    On CUDA, triton's driver helpers (a C module built with the system compiler into the
    run's fresh TRITON_CACHE_DIR, ~1 s) are loaded too: both compilers load kernels through
    them, and the first in the process would otherwise pay the build for both.
    """
    import importlib

    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    ShapeEnv()
    for name in ("triton.language", "torch._inductor.compile_fx", "inductor_lite", "aot"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    if device.type == "cuda":
        try:
            from triton.runtime import driver

            driver.active.utils  # noqa: B018 (the attribute's first read builds the helpers)
            driver.active.get_current_device()
        except Exception:  # no triton, or another backend: nothing shared to warm
            pass


def run_workload(workload: Workload, impls: Sequence[tuple[str, Impl]], settings: Settings,
                 ) -> list[Result]:
    """Measure ``workload`` under every implementation; failures are recorded, never raised."""
    device = torch.device(settings.device)
    runners = [
        _Runner(impl, name, Result(workload.name, workload.kind, name,
                                   tolerance=str(workload.tolerance), clock=settings.clock))
        for name, impl in impls
    ]

    def build() -> Instance:
        return workload.build(device, settings.quick)

    _warm_shared_imports(device)
    with _grad_mode(workload):
        for r in runners:
            try:
                r.instance = build()
                _sync(device)
                start = time.perf_counter()
                r.call = r.impl.compile(r.instance.fn)
                # compile() is part of what a user waits for: torch.compile imports its whole
                # stack there, Strata on the first call; both count toward compile time.
                r.result.compile_s = time.perf_counter() - start
            except Exception as exc:
                r.fail("setup", exc)

        threads = torch.get_num_threads()
        for r in runners:
            if not r.alive:
                continue
            assert r.call is not None and r.instance is not None
            with _WarningCapture(r.result):
                try:
                    _sync(device)
                    start = time.perf_counter()
                    output = r.call(*r.instance.args)
                    _sync(device)
                    r.result.compile_s = (r.result.compile_s or 0.0) + time.perf_counter() - start
                    r.first_output = _snapshot(output, r.instance)
                except Exception as exc:
                    r.fail("first call", exc)
            _keep_threads(r, threads)

        eager = next((r for r in runners if r.name == "eager"), None)
        _check_correctness(runners, eager, workload)

        for _ in range(settings.warmup):
            for r in runners:
                _guarded(r, "warmup", r.call_once)

        calls = _calls_per_sample(workload, settings, eager, device)
        for round_index in range(settings.repeats):
            shift = round_index % max(len(runners), 1)
            for r in runners[shift:] + runners[:shift]:
                r.result.calls_per_sample = calls
                _guarded(r, "timing", partial(r.take_sample, calls, device, settings.clock))

        if device.type == "cuda":
            for r in runners:
                _guarded(r, "peak memory", partial(_peak_memory, r, device))

    for r in runners:
        _summarise(r.result)
        try:
            # Same grad mode as the timed calls: a compiler may capture differently under no_grad.
            with _grad_mode(workload):
                counts = r.impl.graph_counts(build)
            r.result.graphs, r.result.graph_breaks = counts.graphs, counts.breaks
            r.result.counts_note = counts.note
        except Exception as exc:  # counting is best effort; the timing stands without it
            r.result.counts_note = f"n/a ({first_line(exc)})"
    _relative_to_eager([r.result for r in runners], eager.result if eager else None)
    return [r.result for r in runners]


class _WarningCapture(logging.Handler):
    """Collects WARNING-and-above log records and Python warnings into a Result while active.

    It listens on the root, ``strata`` and ``torch`` loggers (torch's do not all propagate), and
    counts each record once.
    """

    KEEP = 5
    LOGGERS = ("", "strata", "torch")

    def __init__(self, result: Result) -> None:
        super().__init__(level=logging.WARNING)
        self.result = result
        self._seen: set[int] = set()
        self._warnings: Any = None

    def emit(self, record: logging.LogRecord) -> None:
        if id(record) in self._seen or record.name == log.name:
            return
        self._seen.add(id(record))
        first = record.getMessage().strip().splitlines()
        self._add(f"{record.name}: {first[0] if first else ''}")

    def _add(self, message: str) -> None:
        self.result.warning_count += 1
        if len(self.result.warnings) < self.KEEP:
            self.result.warnings.append(message[:300])

    def __enter__(self) -> _WarningCapture:
        for name in self.LOGGERS:
            logging.getLogger(name).addHandler(self)
        self._warnings = warnings.catch_warnings(record=True)
        self._caught = self._warnings.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc: object) -> None:
        self._warnings.__exit__(*exc)
        for caught in self._caught:
            self._add(f"{caught.category.__name__}: {str(caught.message).strip()[:200]}")
        for name in self.LOGGERS:
            logging.getLogger(name).removeHandler(self)


def _keep_threads(r: _Runner, threads: int) -> None:
    """Undo a compiler's change to the process-wide thread count, and say which one made it.

    The OpenMP thread count is shared by eager, every compiled kernel and every implementation in
    the process; left changed, it would skew all of their timings, not only the changer's.
    """
    now = torch.get_num_threads()
    if now != threads:
        log.warning("%s changed torch's thread count from %d to %d; restored",
                    r.name, threads, now)
        r.result.note = f"its compile changed torch's thread count {threads} -> {now}; restored"
        torch.set_num_threads(threads)


def _guarded(r: _Runner, stage: str, action: Callable[[], object]) -> None:
    if not r.alive:
        return
    try:
        action()
    except Exception as exc:
        r.fail(stage, exc)


def _peak_memory(r: _Runner, device: torch.device) -> None:
    assert r.call is not None and r.instance is not None
    _sync(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    r.call(*r.instance.args)
    _sync(device)
    r.result.peak_mem_bytes = torch.cuda.max_memory_allocated(device) - base


def _check_correctness(runners: Sequence[_Runner], eager: _Runner | None,
                       workload: Workload) -> None:
    tol = workload.tolerance
    for r in runners:
        if not r.alive:
            continue
        if r is eager:
            r.result.correct = True
            r.result.correctness_note = "reference"
            continue
        if eager is None or not eager.alive:
            r.result.correctness_note = "no eager reference"
            continue
        ok, worst, note = compare(eager.first_output, r.first_output, tol.rtol, tol.atol)
        r.result.correct, r.result.max_abs_diff = ok, worst
        r.result.correctness_note = note or None


def _summarise(result: Result) -> None:
    samples = result.samples_s
    if not samples:
        if result.status == OK:
            result.status, result.stage, result.error = FAILED, "timing", "no samples taken"
        return
    result.median_s = statistics.median(samples)
    result.min_s, result.max_s = min(samples), max(samples)
    if len(samples) >= 2:
        quartiles = statistics.quantiles(samples, n=4, method="inclusive")
        result.p25_s, result.p75_s = quartiles[0], quartiles[2]
    else:
        result.p25_s = result.p75_s = samples[0]


def _relative_to_eager(results: Sequence[Result], eager: Result | None) -> None:
    if eager is None or eager.median_s is None:
        return
    for result in results:
        if result.median_s is None:
            continue
        result.speedup = eager.median_s / result.median_s
        result.overhead_us = (result.median_s - eager.median_s) * 1e6
