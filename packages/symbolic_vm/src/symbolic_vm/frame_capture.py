"""capture(): interpret one frame, build its graph, guards and transformed code."""

from __future__ import annotations

import itertools
import logging
import sys

import torch

from symbolic_vm import handlers
from symbolic_vm.codegen import Rebuilder, build_code, effect_lines, source_expr
from symbolic_vm.errors import GraphBreakNeeded, Unsupported
from symbolic_vm.interpreter import SUPPORTED_VERSIONS, Interpreter
from symbolic_vm.output import CellWrite, Output
from symbolic_vm.records import (
    CaptureConfig,
    CapturedGraph,
    CaptureResult,
    FrameLike,
    GraphBreak,
)
from symbolic_vm.values import TensorVar

log = logging.getLogger("strata.symbolic_vm")

_counter = itertools.count()
_ = handlers  # importing the package registers every opcode handler


def reset_counters() -> None:
    """Restart graph numbering."""
    global _counter
    _counter = itertools.count()


def reset() -> None:
    """Forget the VM's state between compilations (compile_api.reset()): graph numbering.

    Registrations made with allow_in_graph/nonstrict_trace/disable_marker are kept, as
    torch._dynamo.reset() keeps them; reset_registries() forgets those too.
    """
    reset_counters()


def capture(frame: FrameLike, config: CaptureConfig) -> CaptureResult:
    """Interpret ``frame``'s code symbolically and return what to run in its place.

    With ``config.fullgraph`` anything the VM cannot capture raises :class:`Unsupported`;
    otherwise it raises :class:`GraphBreakNeeded` (the caller runs the frame eagerly).
    """
    code = frame.f_code
    if sys.version_info[:2] not in SUPPORTED_VERSIONS:
        raise Unsupported(f"Python {sys.version_info[:2]} is not supported by the VM")
    number = next(_counter)
    out = Output(frame.f_globals, config, prefix=f"__strata_{number}")
    grad_before = torch.is_grad_enabled()
    try:
        try:
            if code.co_flags & 0x20 or code.co_flags & 0x80 or code.co_flags & 0x200:
                raise Unsupported(f"{code.co_name} is a generator or coroutine")
            vm = Interpreter(
                out, code, frame.f_globals, dict(frame.f_builtins), local_vars={},
                frame_locals=dict(frame.f_locals),
            )
            result = vm.run()
            # Guards describe the state at frame entry, not after the trace changed it.
            _leave_autocast(out)
            torch._C._set_grad_enabled(grad_before)
            return _finish(out, code, result, f"__compiled_fn_{number}")
        except Unsupported as exc:
            if not exc.lineno:
                exc = exc.located(code.co_filename, code.co_firstlineno)
            if config.fullgraph:
                raise exc from exc.__cause__
            graph_break = GraphBreak(exc.reason, exc.filename, exc.lineno, exc.source_line)
            error = GraphBreakNeeded(
                exc.reason, filename=exc.filename, lineno=exc.lineno,
                source_line=exc.source_line, hint=exc.hint,
            )
            error.breaks = [graph_break]
            raise error from exc
    finally:
        _leave_autocast(out)
        torch._C._set_grad_enabled(grad_before)


def _leave_autocast(out: Output) -> None:
    while out.cleanups:
        torch.amp.autocast_mode._exit_autocast(out.cleanups.pop())  # type: ignore[no-untyped-call]


def _finish(out: Output, code: object, result: object, graph_name: str) -> CaptureResult:
    import types

    from symbolic_vm.values import Var

    assert isinstance(code, types.CodeType) and isinstance(result, Var)
    rebuilder = Rebuilder(out)
    writes = effect_lines(rebuilder, out)
    return_expr = rebuilder.expr(result)
    graph = out.builder.graph
    inputs = out.tensor_inputs()
    # Inputs nothing used are dropped from the graph (and guarded only if their metadata was read).
    live = [v for v in inputs if v.node.users]
    for var in inputs:
        if not var.node.users:
            graph.erase_node(var.node)
    guarded = [v for v in inputs if v in live or out.used_placeholder(v)]
    has_ops = any(n.op not in ("placeholder", "output") for n in graph.nodes)
    graphs: list[CapturedGraph] = []
    graph_call = None
    if has_ops or rebuilder.outputs:
        gm = out.builder.finish(rebuilder.outputs)
        example_inputs: list[object] = [out.real_input(v) for v in live]
        graphs.append(CapturedGraph(graph_name, gm, example_inputs))
        graph_call = graph_name
        log.debug("captured %s:\n%s", graph_name, gm.code)
    nonlocals = sorted({e.name for e in out.side_effects if isinstance(e, CellWrite)})
    new_code = build_code(
        code,
        graph_call,
        [source_expr(_source(v)) for v in live],
        rebuilder.lines,
        writes,
        return_expr,
        nonlocals,
    )
    return CaptureResult(
        code=new_code,
        graphs=graphs,
        guards=out.guard_set(guarded),
        breaks=[],
        globals_to_install=out.installs,
    )


def _source(var: TensorVar) -> object:
    assert var.source is not None
    return var.source
