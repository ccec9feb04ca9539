"""CUDA graphs for compiled graphs (``mode="reduce-overhead"``): record once, replay per call.

A compiled graph of small kernels spends most of its time launching them from Python. A CUDA
graph records those launches once and replays them with one call. The replay reads and writes
the very addresses it was recorded with, which decides everything below:

* **Inputs.** A tensor input whose address was the same on every warm-up call (parameters,
  buffers, a tensor the caller reuses) and every ``nn.Parameter`` is read where it lives: a
  replay first checks that it still lives there. Any other tensor input is copied into a
  buffer of ours before each replay; a graph that writes such an input has the new value
  copied back after it. An input found at a new address is copied from then on: the graph is
  recorded again (at most ``MAX_RECORDINGS`` times, then the graph runs unrecorded).
* **Outputs.** A replay overwrites the memory its outputs were recorded in. Every call hands
  out copies (one batched copy of the dense outputs), so a tensor the caller still holds is
  never overwritten by a later call. This costs one copy of the outputs per call; torch
  instead hands out the recorded memory and raises when an overwritten output is read. An
  output sharing memory with an input is handed out as the same view of the caller's tensor
  (a training forward returns the inputs it saves for the backward).
* **Shapes.** A graph is compiled for one set of sizes and strides (the capture layer's guards
  recompile on new ones), and each compiled graph records its own CUDA graph.
* **Not recorded** (the graph runs as compiled, and the reason is logged on
  ``strata.inductor_lite`` and ``strata.perf_hints``): CPU tensors, a cond or data-dependent
  sizes (values read on the host), size symbols (dynamic
  shapes), runtime guards (a host read of a device value), an output viewing an input as
  another dtype, a capture that CUDA refuses. Calls the compiled graph itself would not
  run (other sizes, grad needed, overlapping written inputs) run as it runs them.
* **Random numbers.** aten's random ops draw from torch's default CUDA generator, which CUDA
  graph capture registers: each replay takes the generator's state at that moment and advances
  it as the eager ops would.

Every recording shares one memory pool per device: what a recording leaves in the pool between
calls is only its outputs, which are copied out right after its replay, so one recording's
replay may reuse another's memory. A pool whose recordings have all died is never recorded into
again (the allocator frees such a pool only once it is empty, and refuses to share it before):
the next recording takes a new one.

``reset()`` (run by ``compile_api.reset()``) drops every recording and the pools with them,
and returns their memory to the device; a runner still called afterwards starts over (warm-up
calls, then a new recording).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import torch
import torch.utils._pytree as pytree

from .ir import FallbackNode
from .runtime_values import BranchCall

if TYPE_CHECKING:
    from .compile import CompiledGraph

__all__ = ["CudaGraphRunner", "GraphRecorder", "cudagraph_runner", "live_runners", "reset"]

log = logging.getLogger("strata.inductor_lite")
_hints_log = logging.getLogger("strata.perf_hints")

# Calls run as compiled before the first recording: the first compiles and autotunes the
# Triton kernels (and runs the copying wrapper, _FirstCallCopies), the second shows which
# inputs keep their address.
WARMUP_CALLS = 2
# A recording is redone when an input read in place moves; this bounds how often.
MAX_RECORDINGS = 8


class GraphRecorder(Protocol):
    """Records the launches of one call and replays them (``torch.cuda.CUDAGraph``'s job)."""

    def capture(
        self, fn: Callable[[], tuple[object, ...]], inputs: Sequence[object]
    ) -> tuple[object, ...]:
        """Record ``fn``'s launches without running them; returns its outputs (unfilled).
        ``inputs`` are what ``fn`` reads and may write (a stand-in recorder that does run
        ``fn`` must leave them as they were)."""
        ...

    def replay(self) -> None:
        """Run the recorded launches once more."""
        ...


class _CudaRecorder:
    """A ``torch.cuda.CUDAGraph`` recorded into the device's shared pool."""

    _pools: ClassVar[dict[int, Any]] = {}  # device index -> pool handle, shared by all
    # the recorders alive per device: each holds one use of its device's pool
    _users: ClassVar[dict[int, weakref.WeakSet[_CudaRecorder]]] = {}

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.graph = torch.cuda.CUDAGraph()

    def capture(
        self, fn: Callable[[], tuple[object, ...]], inputs: Sequence[object]
    ) -> tuple[object, ...]:
        del inputs  # a capture launches nothing
        index = self.device.index if self.device.index is not None else torch.cuda.current_device()
        users = self._users.setdefault(index, weakref.WeakSet())
        pool = self._pools.get(index)
        if pool is None or not users:
            # once every graph recorded into a pool is gone, the allocator may only free that
            # pool (it asserts when a capture joins a pool nobody uses): start a new one
            with torch.cuda.device(index):
                pool = self._pools[index] = torch.cuda.graph_pool_handle()
        with torch.cuda.device(index), torch.cuda.graph(self.graph, pool=pool):
            outputs = fn()
        users.add(self)
        return outputs

    def replay(self) -> None:
        self.graph.replay()


def _cuda_recorder(device: torch.device) -> GraphRecorder:
    return _CudaRecorder(device)


# Every runner that holds a recording (a graph, its static buffers and recorded outputs), weakly:
# a runner that nothing calls any more takes its recording with it, and reset() finds the rest.
_live: weakref.WeakSet[CudaGraphRunner] = weakref.WeakSet()


def live_runners() -> list[CudaGraphRunner]:
    """The runners that hold a recording now."""
    return list(_live)


def reset() -> None:
    """Drop every recording and the shared pools, and give their memory back to the device.

    A runner called after this records again from scratch (warm-up calls first).
    """
    runners = list(_live)
    _live.clear()
    had_pools = bool(_CudaRecorder._pools)
    cuda = torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
    if cuda and runners:
        torch.cuda.synchronize()  # no replay may still be reading what is released here
    for runner in runners:
        runner.forget()
    del runners
    _CudaRecorder._pools.clear()
    _CudaRecorder._users.clear()
    if cuda and had_pools:
        # A matmul recorded on the capture stream leaves cuBLAS's workspace for that stream
        # allocated in our pool, cached by cuBLAS's handle pool: it would pin the pool forever.
        clear_workspaces = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear_workspaces is not None:
            clear_workspaces()
        # the pools' blocks are freed once their graphs are gone and they hold nothing; the
        # allocator releases such pools (and only then) on emptying its cache
        torch.cuda.empty_cache()


@dataclass(frozen=True)
class _InputView:
    """An output sharing memory with input ``input``: handed out as the same view of the
    caller's tensor (a forward's saved inputs, a returned view of an input)."""

    input: int
    offset: int  # elements from the input's first element
    dtype: torch.dtype


@dataclass
class _Recording:
    recorder: GraphRecorder
    static: list[object]  # what the recorded graph reads, by input position
    in_place: dict[int, int]  # input position -> the address the graph reads it at
    copied: list[int]  # input positions copied into ``static`` before each replay
    copy_back: list[int]  # copied positions the graph writes: copied out after a replay
    outputs: tuple[object, ...]  # the recorded outputs (flat)
    dense: list[int] = field(default_factory=list)  # outputs copied by one batched copy
    views: dict[int, _InputView] = field(default_factory=dict)
    # outputs copied with their whole storage; outputs sharing one storage share the copy
    shared: list[list[int]] = field(default_factory=list)


def _copy_all(dst: Sequence[object], src: Sequence[object]) -> None:
    """``dst[i].copy_(src[i])`` for every i, launched as few kernels (torch's multi-tensor copy)."""
    torch._foreach_copy_(list(dst), list(src))  # type: ignore[arg-type]


def _storage_ptr(t: torch.Tensor) -> int:
    return int(t.untyped_storage().data_ptr())


def _dense_alone(t: torch.Tensor) -> bool:
    """Whether ``t`` fills its storage exactly, each element once: a copy with its sizes and
    strides is then a copy of everything the storage holds."""
    if t.untyped_storage().nbytes() != t.numel() * t.element_size() or t.storage_offset():
        return False
    span = 1 + sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride(), strict=True))
    return t.numel() == 0 or span == t.numel()


class CudaGraphRunner:
    """A ``CompiledGraph`` whose calls replay a CUDA graph (module docstring for the rules)."""

    def __init__(
        self,
        compiled: CompiledGraph,
        recorder: Callable[[torch.device], GraphRecorder] = _cuda_recorder,
    ) -> None:
        self.compiled = compiled
        self.make_recorder = recorder
        self.skip_reason: str | None = None
        self.recordings = 0
        self.replays = 0
        self._calls = 0
        self._stable: list[bool] | None = None
        self._last_ptrs: list[int | None] = []
        self._moved: set[int] = set()
        self._rec: _Recording | None = None
        names = {spec.name: k for k, spec in enumerate(compiled.lowered.inputs)}
        self._written = sorted(names[w.input] for w in compiled.lowered.input_writes)

    def forget(self) -> None:
        """Drop the recording and what was learned about the inputs: the next calls warm up
        and record again, as on a new runner (a graph skipped for good stays skipped)."""
        self._rec = None
        self.recordings = 0
        self._calls = 0
        self._stable = None
        self._last_ptrs = []
        self._moved = set()
        _live.discard(self)

    def __getattr__(self, name: str) -> Any:
        # kernel_count, kernel_source, eager_calls, ...: the compiled graph's
        return getattr(self.compiled, name)

    def skip(self, reason: str) -> None:
        """Never record this graph; it runs as compiled from now on."""
        self.skip_reason = reason
        self._rec = None
        _live.discard(self)
        log.info("cudagraphs: running this graph unrecorded: %s", reason)
        _hints_log.debug("cudagraphs skipped: %s", reason)

    def _runs_compiled(self, args: Sequence[Any]) -> bool:
        c = self.compiled
        needs_grad = torch.is_grad_enabled() and any(
            isinstance(a, torch.Tensor) and a.requires_grad for a in args
        )
        return not (c.broken or needs_grad or not c._matches(args) or c._writes_overlap(args))

    def __call__(self, *args: Any) -> Any:
        if len(args) == 1 and isinstance(args[0], list) and len(self.compiled.input_keys) != 1:
            args = tuple(args[0])  # the boxed calling convention
        return self._call(args, None)

    def call_prechecked(self, *args: Any) -> Any:
        """As ``CompiledGraph.call_prechecked`` (aot's runtime has checked the inputs). Defined
        here so that it records and replays: found through ``__getattr__`` it was the compiled
        graph's own, and no graph on aot's route (every training graph, every input write)
        was ever recorded."""
        return self._call(args, None)

    def boxed_call(self, args: list[Any], *, as_before: bool = False) -> Any:
        """As ``CompiledGraph.boxed_call``: the list is emptied (after the inputs are copied in,
        on a replay). ``as_before`` is not used: a replay checks its inputs."""
        return self._call(tuple(args), args)

    def _delegate(self, args: Sequence[Any], boxed: list[Any] | None) -> Any:
        if boxed is not None:
            return self.compiled.boxed_call(boxed)
        return self.compiled(*args)

    def _call(self, args: tuple[Any, ...], boxed: list[Any] | None) -> Any:
        if self.skip_reason is not None or not self._runs_compiled(args):
            return self._delegate(args, boxed)
        if self._calls < WARMUP_CALLS:
            self._observe(args)
            self._calls += 1
            return self._delegate(args, boxed)
        rec = self._rec
        if rec is not None:
            moved = [k for k, ptr in rec.in_place.items() if args[k].data_ptr() != ptr]
            if moved:
                self._moved.update(moved)
                rec = self._rec = None
        if rec is None:
            if self.recordings >= MAX_RECORDINGS:
                self.skip(f"recorded {MAX_RECORDINGS} times (inputs keep moving)")
                return self._delegate(args, boxed)
            rec = self._record(args)
            if rec is None:
                return self._delegate(args, boxed)
        return self._replay(rec, args, boxed)

    def _observe(self, args: Sequence[Any]) -> None:
        ptrs = [a.data_ptr() if isinstance(a, torch.Tensor) else None for a in args]
        if self._stable is None:
            self._stable = [p is not None for p in ptrs]
        else:
            self._stable = [
                s and p == q for s, p, q in zip(self._stable, ptrs, self._last_ptrs, strict=True)
            ]
        self._last_ptrs = ptrs

    def _record(self, args: Sequence[Any]) -> _Recording | None:
        device = self.compiled.lowered.device
        stable = self._stable or [False] * len(args)
        static: list[object] = []
        in_place: dict[int, int] = {}
        copied: list[int] = []
        for k, a in enumerate(args):
            if not isinstance(a, torch.Tensor):
                static.append(a)
            elif a.device != device:
                self.skip(f"input {k} is on {a.device}, the graph on {device}")
                return None
            elif k not in self._moved and (stable[k] or isinstance(a, torch.nn.Parameter)):
                static.append(a)
                in_place[k] = a.data_ptr()
            else:
                buf = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device)
                buf.copy_(a)
                static.append(buf)
                copied.append(k)
        recorder = self.make_recorder(device)
        run = self.compiled.run
        try:
            outputs = recorder.capture(lambda: tuple(run(static)), static)
        except Exception as exc:
            self.skip(f"the capture failed: {type(exc).__name__}: {exc}")
            return None
        self.recordings += 1
        copy_back = [k for k in self._written if k in copied]
        plan = _output_plan(static, outputs)
        if plan is None:
            self.skip("an output views an input's memory as another dtype")
            return None
        dense, views, shared = plan
        log.debug(
            "cudagraphs: recorded a graph (%d inputs read in place, %d copied in)",
            len(in_place), len(copied),
        )
        self._rec = _Recording(
            recorder, static, in_place, copied, copy_back, outputs, dense, views, shared
        )
        _live.add(self)
        return self._rec

    def _replay(self, rec: _Recording, args: tuple[Any, ...], boxed: list[Any] | None) -> Any:
        if rec.copied:
            _copy_all([rec.static[k] for k in rec.copied], [args[k] for k in rec.copied])
        written = [args[k] for k in rec.copy_back]
        # the inputs that outputs are views of; the others may go (the boxed call's point)
        args_kept = {v.input: args[v.input] for v in rec.views.values()}
        if boxed is not None:
            boxed.clear()  # the inputs' values are in our buffers now
        del args
        rec.recorder.replay()
        self.replays += 1
        if written:
            _copy_all(written, [rec.static[k] for k in rec.copy_back])
        flat = list(rec.outputs)
        if rec.dense:
            recorded = [rec.outputs[j] for j in rec.dense]
            fresh = [
                torch.empty_strided(o.shape, o.stride(), dtype=o.dtype, device=o.device)
                for o in recorded
                if isinstance(o, torch.Tensor)
            ]
            _copy_all(fresh, recorded)
            for j, t in zip(rec.dense, fresh, strict=True):
                flat[j] = t
        for j, view in rec.views.items():
            o, base = rec.outputs[j], args_kept[view.input]
            assert isinstance(o, torch.Tensor) and isinstance(base, torch.Tensor)
            flat[j] = base.as_strided(o.shape, o.stride(), base.storage_offset() + view.offset)
        for group in rec.shared:
            first = rec.outputs[group[0]]
            assert isinstance(first, torch.Tensor)
            storage = first.untyped_storage().clone()  # type: ignore[no-untyped-call]
            for j in group:
                o = rec.outputs[j]
                assert isinstance(o, torch.Tensor)
                flat[j] = torch.empty(0, dtype=o.dtype, device=o.device).set_(
                    storage, o.storage_offset(), o.shape, o.stride()
                )
        return pytree.tree_unflatten(flat, self.compiled.out_spec)


def _output_plan(
    static: Sequence[object], outputs: Sequence[object]
) -> tuple[list[int], dict[int, _InputView], list[list[int]]] | None:
    """How each recorded output is handed out: copied in one batch (a dense tensor alone in
    its storage), as a view of an input it shares memory with, or with its whole storage
    (views of a larger buffer; outputs sharing a storage share one copy, so they stay views
    of each other). None when an output views an input as another dtype."""
    inputs = {
        _storage_ptr(t): k for k, t in enumerate(static) if isinstance(t, torch.Tensor)
    }
    by_storage: dict[int, list[int]] = {}
    views: dict[int, _InputView] = {}
    for j, o in enumerate(outputs):
        if not isinstance(o, torch.Tensor):
            continue
        ptr = _storage_ptr(o)
        k = inputs.get(ptr)
        if k is not None:
            base = static[k]
            assert isinstance(base, torch.Tensor)
            delta = o.data_ptr() - base.data_ptr()
            if base.dtype != o.dtype or delta % o.element_size():
                return None  # a reinterpreting view of an input: not rebuilt here
            views[j] = _InputView(k, delta // o.element_size(), o.dtype)
            continue
        by_storage.setdefault(ptr, []).append(j)
    dense: list[int] = []
    shared: list[list[int]] = []
    for group in by_storage.values():
        first = outputs[group[0]]
        assert isinstance(first, torch.Tensor)
        if len(group) == 1 and _dense_alone(first):
            dense.append(group[0])
        else:
            shared.append(group)
    return sorted(dense), views, shared


def cudagraph_runner(compiled: CompiledGraph) -> CompiledGraph | CudaGraphRunner:
    """``compiled`` recorded into CUDA graphs, or ``compiled`` itself (with the reason logged)
    when its graph cannot be recorded at all."""
    lowered = compiled.lowered
    reason = None
    if lowered.device.type != "cuda":
        reason = f"the graph runs on {lowered.device.type}, not CUDA"
    elif not compiled.items:
        reason = "the graph launches nothing"
    elif lowered.symbols:
        reason = "the graph has symbolic sizes (dynamic shapes)"
    elif lowered.guards:
        reason = "the graph checks values on the host at run time (runtime guards)"
    elif lowered.float_inputs or any(
        isinstance(i, FallbackNode) and (i.binds or isinstance(i.target, BranchCall))
        for i in compiled.items
    ):
        # a replay would keep the recorded branch, sizes and scalars
        reason = "the graph reads values on the host (a cond's predicate, data-dependent sizes)"
    if reason is not None:
        log.info("cudagraphs: running this graph unrecorded: %s", reason)
        _hints_log.debug("cudagraphs skipped: %s", reason)
        return compiled
    return CudaGraphRunner(compiled)
