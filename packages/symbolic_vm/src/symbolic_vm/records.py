"""The records capture() takes and returns, and the frame protocol it reads."""

from __future__ import annotations

import contextlib
import inspect
import types
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs

from symbolic_vm.guard_api import GuardSet, Source


class FrameLike(Protocol):
    """What capture() reads of a frame; ``types.FrameType`` satisfies it, tests build it directly.

    ``f_locals`` holds the arguments by name (``*args`` as a tuple, ``**kwargs`` as a dict) and the
    free variables' contents by name: what a frame's f_locals holds before its first instruction.
    """

    @property
    def f_code(self) -> types.CodeType: ...
    @property
    def f_locals(self) -> dict[str, Any]: ...
    @property
    def f_globals(self) -> dict[str, Any]: ...
    @property
    def f_builtins(self) -> dict[str, Any]: ...


@attrs.frozen
class FrameInput:
    """A frame-like record made from a function and its arguments (see :func:`frame_from_call`)."""

    f_code: types.CodeType
    f_locals: dict[str, Any]
    f_globals: dict[str, Any]
    f_builtins: dict[str, Any]


def frame_from_call(
    fn: Callable[..., object],
    args: tuple[object, ...] = (),
    kwargs: Mapping[str, object] | None = None,
) -> FrameInput:
    """The frame ``fn(*args, **kwargs)`` would start with, without running it."""
    func = fn.__func__ if isinstance(fn, types.MethodType) else fn
    if isinstance(fn, types.MethodType):
        args = (fn.__self__, *args)
    if not isinstance(func, types.FunctionType):
        raise TypeError(f"frame_from_call needs a Python function, got {type(fn).__name__}")
    bound = inspect.signature(func).bind(*args, **(kwargs or {}))
    bound.apply_defaults()
    f_locals: dict[str, Any] = dict(bound.arguments)
    code = func.__code__
    for name, cell in zip(code.co_freevars, func.__closure__ or (), strict=True):
        with contextlib.suppress(ValueError):  # an empty cell is absent, as in a real frame
            f_locals[name] = cell.cell_contents
    f_builtins = func.__globals__.get("__builtins__", __builtins__)
    if isinstance(f_builtins, types.ModuleType):
        f_builtins = vars(f_builtins)
    return FrameInput(code, f_locals, func.__globals__, dict(f_builtins))


# Dims per source: keyed by the Source, or by its name() text (``"L['x']"``, older callers).
DimsBySource = Mapping[Source, frozenset[int]] | Mapping[str, frozenset[int]]


@attrs.frozen
class CaptureConfig:
    """How to capture: fail on anything unsupported (fullgraph), and which dims are symbolic.

    Sources are keyed by the Source itself (``LocalSource('x')``; its ``name()`` text,
    ``"L['x']"``, is accepted too). ``dynamic_ints`` holds frame-local int sources
    (``L['n']``, ``L['sizes'][0]``) to trace as SymInt graph inputs (automatic dynamic after
    their value changed); with ``dynamic=True`` every such int is symbolic anyway.
    ``static_dims`` (torch's ``mark_static``) stay static even under ``dynamic=True``.
    """

    fullgraph: bool = False
    dynamic: bool | None = None
    dynamic_dims: DimsBySource = attrs.field(factory=dict)
    static_dims: DimsBySource = attrs.field(factory=dict)
    dynamic_ints: frozenset[Source] | frozenset[str] = frozenset()
    # torch.compile's settings of these names: Tensor.item() as an unbacked symbol, and ops
    # whose output sizes depend on data (nonzero, x[mask]) with unbacked sizes; else breaks.
    capture_scalar_outputs: bool = False
    capture_dynamic_output_shape_ops: bool = False
    # torch's inline_inbuilt_nn_modules: a module reached from a frame local is guarded by its
    # class and the values the trace read from it, its parameters by metadata (MODULE_PARAMS
    # without identity), so one compiled frame serves every module of that class and layout
    # (the layers of a stack). Modules under ``pinned_locals`` (the module compile() wrapped)
    # stay guarded by identity, which lets the code take their parameters from one reader.
    inline_inbuilt_nn_modules: bool = False
    pinned_locals: frozenset[str] = frozenset()


@attrs.frozen
class CapturedGraph:
    """One graph to compile; compile_api stores the backend's callable as global ``name``."""

    name: str
    gm: Any  # torch.fx.GraphModule
    example_inputs: list[object]
    # Where each input is read from, in input order: the guards on these sources tell the
    # frontend what every call's inputs are (it may then skip a backend's own input check).
    input_sources: tuple[Source, ...] = ()


@attrs.frozen
class GraphBreak:
    """Where and why the VM could not keep capturing."""

    reason: str
    filename: str
    lineno: int
    source_line: str
    # (filename, lineno) of the calls that led there, innermost first (empty: the frame's own)
    callers: tuple[tuple[str, int], ...] = ()


def _the_guards_as_captured(result: CaptureResult) -> Callable[[], GuardSet]:
    return lambda: result.guards


@attrs.frozen
class CaptureResult:
    """capture()'s answer: code to run in place of the frame, its graphs, guards and breaks.

    ``guards`` are the guards as the capture left them. ``rebuild_guards()`` returns a new set:
    those guards plus a SHAPE guard per fact the capture's ShapeEnv holds at the time of the
    call. A backend that traces a graph on its symbolic example inputs can add facts to that
    ShapeEnv (specialise a size, relate two), and its compiled code is valid only where they
    hold, so the caller builds the guards it installs after the backends ran (as TorchDynamo
    does). It raises guards.ShapeGuardError for a fact the guards cannot express.
    """

    code: types.CodeType
    graphs: list[CapturedGraph]
    guards: GuardSet
    breaks: list[GraphBreak]
    globals_to_install: dict[str, object]
    rebuild_guards: Callable[[], GuardSet] = attrs.field(
        default=attrs.Factory(_the_guards_as_captured, takes_self=True), eq=False, repr=False
    )
