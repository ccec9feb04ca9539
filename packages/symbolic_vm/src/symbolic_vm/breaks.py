"""Graph breaks in the root frame: finish the graph before the instruction, resume after it.

The residual code and the ``__resume_at_<offset>_<n>`` functions are built by
:mod:`symbolic_vm.resume` from a BreakPlan. The plan's *helper* is a function generated like the
fullgraph transformed code (same parameters): it runs the graph captured so far, replays the side
effects and returns the values of the stack and of the live locals at the break.
"""

from __future__ import annotations

import itertools
import types

import torch

from symbolic_vm.codegen import Rebuilder, build_code, effect_lines
from symbolic_vm.errors import Unsupported
from symbolic_vm.interpreter import BreakAt, Interpreter
from symbolic_vm.output import CellWrite, Output
from symbolic_vm.records import GraphBreak
from symbolic_vm.resume import (
    BreakPlan,
    Null,
    ResumeBuilder,
    Slot,
    Value,
    WithExit,
    positional_helper,
    why_not_break_at,
)
from symbolic_vm.values import (
    AutocastExitVar,
    ContextExitVar,
    IteratorVar,
    NullVar,
    SymVar,
    TensorVar,
    Var,
)

_resume_counter = itertools.count()
RESUMES = ResumeBuilder(lambda: next(_resume_counter))


def reset_resumes() -> None:
    """Forget cached resume functions and restart their numbering."""
    global _resume_counter
    _resume_counter = itertools.count()
    RESUMES.clear()


def break_record(error: Unsupported) -> GraphBreak:
    """The GraphBreak entry explain() reports for ``error``."""
    return GraphBreak(error.reason, error.filename, error.lineno, error.source_line)


def plan_break(
    out: Output, vm: Interpreter, brk: BreakAt
) -> tuple[Rebuilder, list[str], str, list[Slot], list[tuple[str, Slot]]]:
    """Rebuild expressions for the stack and live locals at the break.

    Returns the rebuilder (graph outputs, temporaries), the side-effect writes, the helper's
    return expression, and the plan's stack and local slots.
    """
    code = vm.code
    exits = [v for v in brk.stack if isinstance(v, (ContextExitVar, AutocastExitVar))]
    if any(not isinstance(v, ContextExitVar) or v.manager is None for v in exits):
        raise brk.error  # autocast / set_grad_enabled blocks are not re-entered yet
    if why_not_break_at(code, brk.offset) is not None:
        raise brk.error  # in or before a loop, or in a try block: TorchDynamo's policy
    if any(isinstance(v, IteratorVar) for v in brk.stack):
        # Inside a for loop, as TorchDynamo does: the frame runs eagerly rather than resuming
        # with a half-consumed iterator whose contents the guards could not cover.
        raise brk.error
    live: list[tuple[str, Slot]] = []
    bound: dict[str, Var] = dict(brk.local_vars)
    for name in vm.frame_locals or {}:
        if name not in bound and name not in code.co_freevars:
            bound[name] = vm.load_local(name)
    for name in code.co_cellvars:
        # A cell's current value is passed like a local; the resume function makes the cell.
        cell = vm.cells.get(name)
        if cell is not None and cell.value is not None:
            bound[name] = cell.value
    rebuilder = Rebuilder(out)
    _outputs_in_graph_order(out, rebuilder, [*brk.stack, *bound.values()])
    writes = effect_lines(rebuilder, out)
    values: list[str] = []
    stack: list[Slot] = []
    for var in brk.stack:
        if isinstance(var, NullVar):
            stack.append(Null())
        elif isinstance(var, ContextExitVar):
            # The residual code re-enters a fresh manager around the instruction, and so does
            # the resume function: the graph must hand back the grad mode outside the block.
            manager = torch.enable_grad if var.manager else torch.no_grad
            stack.append(WithExit(len(values)))
            values.append(f"{out.install(manager, 'grad_mode')}()")
        else:
            stack.append(Value(len(values)))
            values.append(rebuilder.expr(var))
    for name, var in bound.items():
        live.append((name, Value(len(values))))
        values.append(rebuilder.expr(var))
    return_expr = "(" + "".join(f"{v}, " for v in values) + ")"
    if exits:
        outside = exits[0]
        assert isinstance(outside, ContextExitVar)
        # Unconditionally: the tracer's own grad mode was already reset to the frame's entry.
        out.builder.call_function(torch._C._set_grad_enabled, (outside.restore,))
    return rebuilder, writes, return_expr, stack, live


def _outputs_in_graph_order(out: Output, rebuilder: Rebuilder, live: list[Var]) -> None:
    """Number the graph outputs that are live values in the order the graph computed them.

    TorchDynamo's README toy example returns ``(truediv, lt)``: graph order, not stack order.
    """
    position = {node: i for i, node in enumerate(out.builder.graph.nodes)}
    produced = [
        v for v in live
        if isinstance(v, TensorVar | SymVar) and v.node.op != "placeholder" and v.node in position
    ]
    for var in sorted(produced, key=lambda v: position[v.node]):
        rebuilder.expr(var)


def residual_code(  # noqa: PLR0917 - the parts of one break
    out: Output,
    code: types.CodeType,
    brk: BreakAt,
    helper: tuple[str | None, list[str], Rebuilder, list[str], str],
    stack: list[Slot],
    live: list[tuple[str, Slot]],
) -> tuple[types.CodeType, dict[str, object]]:
    """The broken frame's transformed code and the globals it needs."""
    graph_call, graph_args, rebuilder, writes, return_expr = helper
    nonlocals = sorted({e.name for e in out.side_effects if isinstance(e, CellWrite)})
    helper_code = build_code(
        code, graph_call, graph_args, rebuilder.lines, writes, return_expr, nonlocals
    )
    flat, names = positional_helper(helper_code)
    plan = BreakPlan(
        code, brk.offset, tuple(stack), tuple(live), helper="", helper_args=names,
        helper_code=flat,
    )
    built = RESUMES.residual(plan)
    return built.code, built.globals_to_install(out.f_globals)
