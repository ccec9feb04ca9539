"""How each value crosses a graph break: the slots of the stack and the live locals.

:func:`plan_crossing` is the last step of symbolic_vm.breaks.policy.decide for a break it allows:
it closes the graph's grad-mode/autocast/inference-mode blocks (re-entered on both sides as
:class:`Reenter` slots), passes a stack value that is also a user local once, under its name
(:class:`Local`), turns a pending ``x.mul(...)`` on a tensor into ``[Tensor.mul, x]`` (so the
resume function traces the call into its graph), and numbers the helper's return values
(graph outputs in graph order). It raises Unsupported where a value cannot cross.
"""

from __future__ import annotations

import ast
import dis
import types
from typing import TYPE_CHECKING

import torch

from symbolic_vm import emit
from symbolic_vm.breaks.decisions import Resume, Stop
from symbolic_vm.breaks.slots import Const, Handoff, Local, Null, Reenter, Slot, Value
from symbolic_vm.bytecode import PY_VERSION
from symbolic_vm.codegen import Rebuilder, effect_lines
from symbolic_vm.errors import Unsupported
from symbolic_vm.guard_api import LocalSource
from symbolic_vm.output import Output
from symbolic_vm.values import (
    AutocastExitVar,
    ConstVar,
    ContextExitVar,
    IteratorVar,
    MethodVar,
    NestedFunctionVar,
    NullVar,
    SymVar,
    TensorVar,
    Var,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter

__all__ = ["eagerly", "has_pending_iterator", "plan_crossing"]


def plan_crossing(
    out: Output, vm: Interpreter, stop: Stop, handoffs: dict[int, Var]
) -> Resume:
    """The plan of a break at ``stop``: the graph's outputs, side-effect writes, the helper's
    return expression, and a slot per stack value and live local. ``handoffs`` are the user
    managers handed on to the resume function, by stack slot (policy._handoff_managers)."""
    code = vm.code
    managers = _reentered_managers(out, stop)
    live: list[tuple[str, Slot]] = []
    bound: dict[str, Var] = dict(stop.local_vars)
    # A frame local the trace never read is passed on as it is, by name: wrapping it would
    # guard it (a tensor that is also another argument gets an "is still" guard, and the frame
    # recompiles for each way its arguments alias, as in PyTorch's test_resume_paths_join).
    untouched = [
        name for name in vm.frame_locals or {}
        if name not in bound and name not in code.co_freevars and name not in code.co_cellvars
    ]
    for name in vm.frame_locals or {}:
        if name not in bound and name not in code.co_freevars and name not in untouched:
            bound[name] = vm.load_local(name)
    for name in code.co_cellvars:
        # A cell's current value is passed like a local; the resume function makes the cell.
        cell = vm.cells.get(name)
        if cell is not None and cell.value is not None:
            bound[name] = cell.value
    shared = _rebound_shared_cell(vm, stop, [*stop.stack, *bound.values()])
    if shared is not None:
        # The resume function makes its own cells for the frame's cell variables and a function
        # made in the frame is rebuilt with fresh ones: a later rebinding on either side would
        # go unseen by the other (found by the fuzzer's py_objects family).
        raise eagerly(stop, f"a function made in the frame shares the variable {shared!r} with "
                            "it and one of them rebinds it later (the frame runs eagerly)")
    if has_pending_iterator(list(bound.values()), exact_ok=True):
        # The same for an iterator held in a local, with items left (one over a tuple or
        # range crosses: see below).
        raise eagerly(stop, "an iterator with items left is held in a local (the frame runs "
                            "eagerly)")
    rebuilder = Rebuilder(out)
    _outputs_in_graph_order(out, rebuilder, [*stop.stack, *bound.values()])
    writes = effect_lines(rebuilder, out)
    values: list[ast.expr] = []
    stack: list[Slot] = []
    user_names = set(code.co_varnames) | set(code.co_cellvars)
    named = {id(var): name for name, var in reversed(bound.items()) if name in user_names}
    # [NULL, x.mul] (3.11/3.12) or [x.mul, NULL] (3.13) becomes [Tensor.mul, x]: the same
    # call, and the resume function's VM sees a torch method and a tensor it can trace (a
    # bound method of a real tensor could only be called opaquely, its tensor not being a
    # graph input).
    descriptors = {
        d: _tensor_method_descriptor(out, stop.stack, d) for d in range(len(stop.stack))
    }
    for depth, slot_var in enumerate(stop.stack):
        descriptor = descriptors[depth]
        if descriptor is not None:
            stack.append(Const(descriptor))
            continue
        var = slot_var
        if depth > 0 and descriptors[depth - 1] is not None:
            method = slot_var if isinstance(slot_var, MethodVar) else stop.stack[depth - 1]
            assert isinstance(method, MethodVar)
            var = method.self_var
        if isinstance(var, NullVar):
            stack.append(Null())
        elif depth in handoffs:
            stack.append(Handoff(len(values)))
            values.append(rebuilder.expr(handoffs[depth]))
        elif id(var) in managers:
            stack.append(managers[id(var)])
        elif id(var) in named and not isinstance(var, ConstVar):
            # Passed once, under the user's name: the resume graph's input is named after it.
            stack.append(Local(named[id(var)]))
        else:
            stack.append(Value(len(values)))
            values.append(rebuilder.expr(var))
    iterated: list[str] = []
    for name, var in bound.items():
        if _crosses_as_items(var) and stop.region is None and name not in code.co_cellvars:
            iterated.append(name)  # last: see below
            continue
        live.append((name, Value(len(values))))
        values.append(rebuilder.expr(var))
    crossed: set[int] = set()
    for name in list(iterated):
        # An iterator over a tuple or range held in one local only: the resume function gets
        # the items left as a tuple and makes the iterator again (so its VM traces it: a real
        # iterator is opaque to it). One also reached another way (another local, a container,
        # a write) is passed as the one real iterator the rebuilt code makes for all of them.
        var = bound[name]
        assert isinstance(var, IteratorVar)
        live.append((name, Value(len(values))))
        if rebuilder.made(var.box) or id(var.box) in crossed or _shared(var, bound):
            iterated.remove(name)
            values.append(rebuilder.expr(var))
            continue
        crossed.add(id(var.box))
        values.append(emit.build(
            "tuple", [rebuilder.expr(v) for v in var.box.items[var.box.index:]]
        ))
    for name in untouched:
        live.append((name, Value(len(values))))
        values.append(rebuilder.source(LocalSource(name)))
    return Resume(
        rebuilder, writes, emit.build("tuple", values), stack, live, tuple(iterated)
    )


def _crosses_as_items(var: Var) -> bool:
    """An iterator with items left whose items are exactly what the real one would yield."""
    return isinstance(var, IteratorVar) and var.box.exact and var.box.index < len(var.box.items)


def _shared(var: IteratorVar, bound: dict[str, Var]) -> bool:
    """Whether another live local holds the same iterator."""
    return sum(1 for v in bound.values() if isinstance(v, IteratorVar) and v.box is var.box) > 1


def _rebound_shared_cell(vm: Interpreter, stop: Stop, values: list[Var]) -> str | None:
    """The name of a frame cell variable that a live function made in the frame closes over
    and that the function (``nonlocal``) or the frame after ``stop`` rebinds; else None."""
    own = {id(cell): name for name, cell in vm.cells.items()}
    later = {
        str(inst.argval) for inst in dis.get_instructions(vm.code)
        if inst.offset >= stop.offset and inst.opname in ("STORE_DEREF", "DELETE_DEREF")
    }
    for var in values:
        if not isinstance(var, NestedFunctionVar):
            continue
        rebinds = _stores_to_freevars(var.code)
        for free, cell in zip(var.code.co_freevars, var.closure, strict=False):
            name = own.get(id(cell))
            if name is not None and (free in rebinds or name in later):
                return name
    return None


def _stores_to_freevars(code: types.CodeType) -> set[str]:
    """Free variables that ``code`` (or a function nested in it) rebinds."""
    names = {
        str(inst.argval) for inst in dis.get_instructions(code)
        if inst.opname in ("STORE_DEREF", "DELETE_DEREF") and inst.argval in code.co_freevars
    }
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _stores_to_freevars(const) & set(code.co_freevars)
    return names


def eagerly(stop: Stop, why: str) -> Unsupported:
    """The break's own error, saying why the frame runs eagerly instead of breaking there."""
    error = stop.error
    return Unsupported(
        f"{error.reason}; {why}", filename=error.filename, lineno=error.lineno,
        source_line=error.source_line, hint=error.hint,
    )


def has_pending_iterator(values: list[Var], *, exact_ok: bool = False) -> bool:
    """Whether one of ``values`` is an iterator with items left to produce (with
    ``exact_ok``: other than one over a tuple or range, which can cross a break)."""
    return any(
        isinstance(v, IteratorVar) and v.box.index < len(v.box.items)
        and not (exact_ok and v.box.exact)
        for v in values
    )


def _tensor_method_descriptor(out: Output, stack: list[Var], depth: int) -> object | None:
    """``torch.Tensor.<name>`` when ``stack[depth:depth + 2]`` are the two slots of a pending
    ``x.<name>(...)`` call on a tensor whose class does not override it, else None."""
    if depth + 1 >= len(stack) or (depth > 0 and _is_method_pair(stack, depth - 1)):
        return None
    if not _is_method_pair(stack, depth):
        return None
    first, second = stack[depth], stack[depth + 1]
    method = second if isinstance(first, NullVar) else first
    if not (isinstance(method, MethodVar) and isinstance(method.self_var, TensorVar)):
        return None
    if out.tensor_type(method.self_var) not in (torch.Tensor, torch.nn.Parameter):
        return None  # a subclass may define its own <name>: keep the bound method
    found = getattr(torch.Tensor, method.name, None)
    if isinstance(found, (types.MethodDescriptorType, types.WrapperDescriptorType)):
        return found
    return None


def _is_method_pair(stack: list[Var], depth: int) -> bool:
    """[NULL, method] on 3.11/3.12, [method, NULL] on 3.13."""
    first, second = stack[depth], stack[depth + 1]
    if PY_VERSION >= (3, 13):
        return isinstance(first, MethodVar) and isinstance(second, NullVar)
    return isinstance(first, NullVar) and isinstance(second, MethodVar)


def _reentered_managers(out: Output, stop: Stop) -> dict[int, Reenter]:
    """The manager to re-enter for each grad-mode / autocast block on the stack (by var id).

    The graph is closed in the state outside those blocks (autocast and inference mode exited,
    grad mode restored), and re-entering the managers bottom first must give exactly eager's
    state at the break and on each block's exit. For grad mode each block's manager is chosen so
    that entering it gives the mode the next block was entered in (its ``restore``), the
    innermost one the mode at the break; autocast and inference-mode blocks are re-entered with
    their own arguments.
    """
    grad = [v for v in stop.stack if isinstance(v, ContextExitVar)]
    autocasts = [v for v in stop.stack if isinstance(v, AutocastExitVar)]
    managers: dict[int, Reenter] = {}
    inference = [v for v in autocasts if _is_inference_mode(v)]
    if inference and (grad or _switches_grad_after(out, inference[0].enter_node)):
        # Inference mode switches grad mode off by itself: mixed with grad-mode blocks or
        # switches, the mode to restore outside and at the break is not known. Run eagerly.
        raise eagerly(stop, "inside inference_mode mixed with grad-mode changes (the frame runs "
                            "eagerly)")
    if grad:
        modes = [v.restore for v in grad[1:]] + [_grad_mode_at_break(out)]
        for var, mode in zip(grad, modes, strict=True):
            managers[id(var)] = Reenter(torch.enable_grad if mode else torch.no_grad)
    for block in autocasts:
        if _is_inference_mode(block):
            managers[id(block)] = Reenter(torch.inference_mode, tuple(block.enter_node.args))
            continue
        device, dtype, enabled, cache = block.enter_node.args
        managers[id(block)] = Reenter(
            torch.autocast, (device,),
            (("dtype", dtype), ("enabled", enabled), ("cache_enabled", cache)),
        )
    graph = out.builder.graph
    for block in reversed(autocasts):
        # Not run in the tracer (its state was already left): only recorded.
        leave = (
            torch.autograd.grad_mode._exit_inference_mode
            if _is_inference_mode(block)
            else torch.amp.autocast_mode._exit_autocast
        )
        node = graph.call_function(leave, (block.enter_node,))
        node.meta["example_value"] = None
    if grad:
        node = graph.call_function(torch._C._set_grad_enabled, (grad[0].restore,))
        node.meta["example_value"] = None
    return managers


def _switches_grad_after(out: Output, start: object) -> bool:
    """Whether the graph switches grad mode after node ``start``."""
    seen = False
    for node in out.builder.graph.nodes:
        seen = seen or node is start
        if seen and node.op == "call_function" and node.target is torch._C._set_grad_enabled:
            return True
    return False


def _is_inference_mode(block: AutocastExitVar) -> bool:
    """An inference_mode block (its exit is kept like autocast's, on its enter node)."""
    return bool(block.enter_node.target is torch.autograd.grad_mode._enter_inference_mode)


def _grad_mode_at_break(out: Output) -> bool:
    """Grad mode where the break happened: the graph's last switch, else the frame's entry mode
    (the tracer is back at the entry mode by now; the graph switches only on changes)."""
    mode = torch.is_grad_enabled()
    for node in out.builder.graph.nodes:
        if node.op == "call_function" and node.target is torch._C._set_grad_enabled:
            mode = bool(node.args[0])
    return mode


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

