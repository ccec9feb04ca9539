"""capture(): interpret one frame, build its graph, guards and transformed code."""

from __future__ import annotations

import itertools
import logging
import sys
import types

import torch

from symbolic_vm import calls, handlers, stdlib  # noqa: F401 (stdlib: its trackers, before a trace)
from symbolic_vm.breaks.decisions import Retrace, RunEagerly, RunRegion, Stop
from symbolic_vm.breaks.flow import clear_flows
from symbolic_vm.breaks.policy import break_record, handle_stop, reset_resumes
from symbolic_vm.breaks.region import Region
from symbolic_vm.codegen import (
    Rebuilder,
    Transformed,
    build_code,
    cell_writes,
    effect_lines,
    frame_names,
)
from symbolic_vm.errors import GraphBreakNeeded, Unsupported
from symbolic_vm.graph_close import capture_result, close_graph
from symbolic_vm.interpreter import SUPPORTED_VERSIONS, Interpreter
from symbolic_vm.made_classes import ClassEscapes
from symbolic_vm.output import Output
from symbolic_vm.records import (
    CaptureConfig,
    CaptureResult,
    FrameLike,
)
from symbolic_vm.values import Var
from symbolic_vm.version_check import unsupported_python

log = logging.getLogger("strata.symbolic_vm")

_counter = itertools.count()
_ = handlers  # importing the package registers every opcode handler


def reset_counters() -> None:
    """Restart graph numbering."""
    global _counter
    _counter = itertools.count()


def reset() -> None:
    """Forget the VM's state between compilations (compile_api.reset()): cached resume functions.

    Graph numbering is not restarted: ``__compiled_fn_<n>`` names stay unique for the process, so
    an entry made just before a reset (in another thread) can never call a graph compiled after
    it under a reused name. ``reset_counters()`` restarts it explicitly.

    Registrations made with allow_in_graph/nonstrict_trace/disable_marker are kept, as
    TorchDynamo's reset keeps them; reset_registries() forgets those too.
    """
    reset_resumes()
    clear_flows()


def capture(frame: FrameLike, config: CaptureConfig) -> CaptureResult:
    """Interpret ``frame``'s code symbolically and return what to run in its place.

    With ``config.fullgraph`` anything the VM cannot capture raises :class:`Unsupported`.
    Otherwise it breaks the graph before the frame's instruction that failed (or whose inlined
    call failed): the graph so far, the instruction run for real, a resume function for the
    rest (``result.breaks``). A break inside a loop or try block stops the trace again at the
    outermost loop/try statement around it, which then runs as bytecode. Where no break is
    possible (a user context manager, a function made in the frame still alive at the break)
    it raises :class:`GraphBreakNeeded` and the caller runs the frame eagerly. The decisions
    are symbolic_vm.breaks.policy's (see symbolic_vm/breaks/__init__.py for the path).
    """
    if sys.version_info[:2] not in SUPPORTED_VERSIONS:
        raise Unsupported(unsupported_python() or "this Python is not supported by the VM")
    number = next(_counter)
    stop_at: tuple[int, Unsupported] | None = None
    region: tuple[Region, Unsupported] | None = None
    while True:  # at most 4 traces: a retrace, a region restart, a retrace
        outcome = _capture_once(frame, config, number, stop_at, region)
        if isinstance(outcome, CaptureResult):
            return outcome
        if isinstance(outcome, Retrace):
            if stop_at is not None:  # the second trace must stop before reaching this
                raise _eager(outcome.error, config)
            stop_at = (outcome.step, outcome.error)
        else:
            if region is not None:  # the restarted trace stops before any loop or try
                raise _eager(outcome.error, config)
            region, stop_at = (outcome.region, outcome.error), None


def _capture_once(
    frame: FrameLike,
    config: CaptureConfig,
    number: int,
    stop_at: tuple[int, Unsupported] | None,
    region: tuple[Region, Unsupported] | None = None,
) -> CaptureResult | Retrace | RunRegion:
    """One trace of the frame: its result, or the next trace to make (capture() loops)."""
    code = frame.f_code
    out = Output(frame.f_globals, config, prefix=f"__strata_{number}")
    out.frame_names = frame_names(code)
    grad_before = torch.is_grad_enabled()
    try:
        try:
            if code.co_flags & 0x20 or code.co_flags & 0x80 or code.co_flags & 0x200:
                raise Unsupported(f"{code.co_name} is a generator or coroutine")
            vm = Interpreter(
                out, code, frame.f_globals, dict(frame.f_builtins), local_vars={},
                frame_locals=dict(frame.f_locals), call=calls.call,
            )
            # Only a function's frame breaks: a class body or module (no CO_OPTIMIZED: locals in
            # a dict) has no resume functions, and a 3.11 comprehension's parameter `.0` is no
            # name the generated code can use: those run eagerly on anything unsupported.
            nargs = code.co_argcount + code.co_kwonlyargcount
            vm.may_break = (
                not config.fullgraph and bool(code.co_flags & 0x1)
                and all(name.isidentifier() for name in code.co_varnames[:nargs])
            )
            vm.stop_at = stop_at
            vm.stop_region = region
            result = vm.run_frame()
            if isinstance(result, Retrace):
                return result
            if isinstance(result, Stop):
                _leave_autocast(out)
                torch._C._set_grad_enabled(grad_before)
                # The graph-break path goes on in symbolic_vm.breaks.policy.handle_stop.
                outcome = handle_stop(out, vm, result, f"__compiled_fn_{number}")
                if isinstance(outcome, RunEagerly):
                    raise outcome.error
                return outcome
            # Guards describe the state at frame entry, not after the trace changed it.
            _leave_autocast(out)
            torch._C._set_grad_enabled(grad_before)
            return _finish(out, code, result, f"__compiled_fn_{number}")
        except ClassEscapes as exc:
            # A class made by a class statement leaves the frame: break at that statement.
            if vm.may_break and stop_at is None:
                return Retrace(exc.step, exc)
            raise _eager(exc, config) from None
        except Unsupported as exc:
            if not exc.lineno:
                exc = exc.located(code.co_filename, code.co_firstlineno)
            if config.fullgraph:
                raise exc from exc.__cause__
            raise _eager(exc, config) from exc
    finally:
        _leave_autocast(out)
        torch._C._set_grad_enabled(grad_before)


def _eager(exc: Unsupported, config: CaptureConfig) -> Unsupported:
    """The error capture() raises: ``exc`` itself with fullgraph, else GraphBreakNeeded."""
    if config.fullgraph:
        return exc
    error = GraphBreakNeeded(
        exc.reason, filename=exc.filename, lineno=exc.lineno, source_line=exc.source_line,
        hint=exc.hint,
    )
    error.breaks = [break_record(exc)]
    return error


def _leave_autocast(out: Output) -> None:
    while out.cleanups:
        torch.amp.autocast_mode._exit_autocast(out.cleanups.pop())  # type: ignore[no-untyped-call]


def _finish(
    out: Output, code: types.CodeType, result: Var, graph_name: str
) -> CaptureResult:
    rebuilder = Rebuilder(out)
    writes = effect_lines(rebuilder, out)
    return_expr = rebuilder.expr(result)
    graphs, graph_call, graph_args, guarded = close_graph(out, rebuilder, graph_name)
    new_code = build_code(code, Transformed(
        graph_call, graph_args, rebuilder.lines, writes, return_expr, cell_writes(out)
    ))
    return capture_result(out, new_code, (graphs, guarded), [])
