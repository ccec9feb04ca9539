"""``control_flow.map(f, xs, *args)`` (torch's ``_higher_order_ops.map``) inside traced code.

Unrolled over ``xs``'s leading dimension, a size guarded like any specialised one: step ``i``
calls ``f`` on the ``i``-th slices of the tensors in ``xs`` (a tensor, or a list or tuple of
them) and ``args``; the steps' results are stacked leaf by leaf (tensors, tuples and lists of
them), which is what eager's map returns. torch.compile captures one ``map_impl`` node over a
traced body instead; the results and graph count are the same (the graph has one copy of the
body per step, and a new leading size compiles again).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import torch

from symbolic_vm import operations as ops
from symbolic_vm.constant_values import specialize
from symbolic_vm.errors import Unsupported
from symbolic_vm.values import ConstVar, ListBox, ListVar, TensorVar, TupleVar, Var

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter

__all__ = ["control_flow_map"]


def control_flow_map(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    out = vm.out
    if len(args) < 2 or kwargs:
        raise Unsupported("control_flow.map(f, xs, *args) with other arguments is not traced")
    fn, xs, rest = args[0], args[1], args[2:]
    structure: str | None = None
    if isinstance(xs, TensorVar):
        flat: list[Var] = [xs]
    elif isinstance(xs, (TupleVar, ListVar)):
        structure = "tuple" if isinstance(xs, TupleVar) else "list"
        flat = list(ops.items(out, xs))
    else:
        raise Unsupported("control_flow.map over something other than tensors is not traced")
    if not flat or not all(isinstance(x, TensorVar) for x in flat):
        raise Unsupported("control_flow.map over something other than tensors is not traced")
    examples = [cast(TensorVar, x).example for x in flat]
    if any(e.dim() == 0 for e in examples):
        raise Unsupported("control_flow.map over a 0-d tensor (eager raises)")
    # A symbolic leading size is specialised (guarded): the steps are unrolled.
    sizes = {specialize(e.shape[0]) for e in examples}
    if len(sizes) != 1 or 0 in sizes:
        raise Unsupported(
            "control_flow.map over an empty or uneven leading dimension (eager raises)"
        )
    count = int(next(iter(sizes)))
    steps: list[Var] = []
    for index in range(count):
        picked = [
            ops.graph_call(out, torch.select, [x, ConstVar(0), ConstVar(index)], {})
            for x in flat
        ]
        if structure is None:
            step_xs: Var = picked[0]
        elif structure == "tuple":
            step_xs = TupleVar(tuple(picked))
        else:
            step_xs = ListVar(ListBox(picked))
        steps.append(vm.call(fn, [step_xs, *rest], {}))
    return _stack_steps(vm, steps)


def _stack_steps(vm: Interpreter, steps: list[Var]) -> Var:
    """The steps' results stacked leaf by leaf, in the structure each step returned."""
    out = vm.out
    first = steps[0]
    if isinstance(first, TensorVar):
        if not all(isinstance(s, TensorVar) for s in steps):
            raise Unsupported("control_flow.map steps returning different structures")
        return ops.graph_call(out, torch.stack, [TupleVar(tuple(steps))], {})
    if isinstance(first, (TupleVar, ListVar)):
        columns = [ops.items(out, s) for s in steps]
        if any(
            type(s) is not type(first) or len(c) != len(columns[0])
            for s, c in zip(steps, columns, strict=True)
        ):
            raise Unsupported("control_flow.map steps returning different structures")
        stacked = [_stack_steps(vm, [c[i] for c in columns]) for i in range(len(columns[0]))]
        if isinstance(first, TupleVar):
            return TupleVar(tuple(stacked))
        return ListVar(ListBox(stacked))
    raise Unsupported("control_flow.map whose function returns something other than tensors")
