"""``torch._check`` on a value read from a tensor, where a failure in the graph would not be
eager's.

Such a check cannot be decided while tracing (its symbol is unbacked: ``c = t.sum().item()``),
so torch records it as a runtime assertion that the graph runs. The graph raises from its
middle, before the transformed code replays the Python side effects the frame made earlier
(eager made them before raising), and outside any ``try`` of the program (eager's ``except``
catches it). In those two cases the check is a graph break instead: it runs eagerly, after the
graph before it and its effects, inside the program's own ``try`` (the statement runs as
bytecode), and raises eager's own RuntimeError. Elsewhere it stays in the graph, as
torch.compile keeps it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch.fx.experimental import symbolic_shapes

from symbolic_vm import operations as ops
from symbolic_vm.errors import Unsupported
from symbolic_vm.values import ConstVar, SymVar, Var

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter

# Where torch._check and its family defer an undecidable condition to a runtime assertion.
EXPECT_TRUE = symbolic_shapes.expect_true


def _inside_handler(vm: Interpreter) -> bool:
    """Whether an exception at the current instruction of any traced frame reaches a handler
    of the program (a ``try``, or a ``with`` block's exit) before leaving the compiled frame."""
    frame: Interpreter | None = vm
    while frame is not None:
        offset = frame.instructions[frame.ip - 1].offset
        if frame.handler_target(offset) is not None:
            return True
        frame = frame.parent
    return False


def expect_true(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var | None:
    """``expect_true(cond)``, where torch._check defers a condition: a constant ``cond`` is
    its own answer and a backed symbolic one is guarded (eager's check then raises while
    tracing, in the trace: as a graph node the assertion failed when the graph ran, outside the
    program's ``try``); an unbacked one after side effects or inside a handler is a break
    (Unsupported). None: the graph records it."""
    if len(args) == 1 and not kwargs and isinstance(args[0], ConstVar):
        if type(args[0].value) is bool:
            return args[0]
        return None
    if len(args) != 1 or kwargs or not isinstance(args[0], SymVar):
        return None
    cond = args[0].example
    if not isinstance(cond, torch.SymBool):
        return None
    if not symbolic_shapes.free_unbacked_symbols(cond):
        # a symbol with a value (a dynamic size or int): decided now under a guard, as torch
        # does; False raises eager's error in the trace
        return ConstVar(ops.const_value(vm.out, args[0]))
    if vm.out.side_effects:
        raise Unsupported(
            "torch._check on a value read from a tensor after Python side effects: failing in "
            "the graph, it would raise before they are replayed, so it runs eagerly"
        )
    if _inside_handler(vm):
        raise Unsupported(
            "torch._check on a value read from a tensor inside try/with: failing in the graph, "
            "it would raise outside the program's handler, so it runs eagerly"
        )
    return None
