"""User objects of registered pytree classes passed to a ``nonstrict_trace`` function.

The function becomes one graph node (``torch_calls.opaque_call``), whose arguments must be
graph values. An instance of a class registered with ``torch.utils._pytree`` (a ``Point`` with
tensor fields) is flattened here by running the class's flatten function in the trace (so the
fields' current values are read, a field set earlier in the frame included); the node then
calls a wrapper that rebuilds the objects from the leaves with the class's unflatten function
and calls the user's function on them, as torch.compile does. The rebuilt objects are new ones:
a field the function sets on its argument is not seen by the caller (torch's behaviour too).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import torch.utils._pytree as pytree

from symbolic_vm import operations as ops
from symbolic_vm.errors import Unsupported
from symbolic_vm.values import NewObjectVar, ObjectVar, Var

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter

__all__ = ["flatten_user_arguments"]

# How one argument is rebuilt: None for a leaf passed as it is, else the class's unflatten
# function, its constant context and the plans of its children.
_Plan = tuple[Any, Any, list[Any]] | None


def _user_class(var: Var) -> type | None:
    """The class of a user object that pytree knows how to flatten, or None."""
    if isinstance(var, NewObjectVar):
        cls: type = var.box.cls
    elif isinstance(var, ObjectVar) and not isinstance(var.value, type):
        cls = type(var.value)
    else:
        return None
    if cls.__module__ == "builtins" or cls not in pytree.SUPPORTED_NODES:
        return None
    return cls


def _flatten(vm: Interpreter, var: Var, leaves: list[Var], depth: int = 0) -> _Plan:
    cls = _user_class(var)
    if cls is None:
        leaves.append(var)
        return None
    if depth > 32:
        raise Unsupported("nonstrict_trace argument nested too deeply to flatten")
    node = pytree.SUPPORTED_NODES[cls]
    flat = vm.call(vm.out.wrap(node.flatten_fn, None), [var], {})
    parts = ops.items(vm.out, flat)
    if len(parts) != 2:
        raise Unsupported(f"the pytree flatten function of {cls.__name__} returns no pair")
    context = ops.const_value(vm.out, parts[1])
    children = [_flatten(vm, child, leaves, depth + 1) for child in ops.items(vm.out, parts[0])]
    return (node.unflatten_fn, context, children)


def _rebuild(plan: _Plan, leaves: Any) -> Any:
    if plan is None:
        return next(leaves)
    unflatten, context, children = plan
    return unflatten([_rebuild(child, leaves) for child in children], context)


def _call_rebuilt(fn: Any, plans: list[_Plan], *flat: Any, **kwargs: Any) -> Any:
    leaves = iter(flat)
    return fn(*(_rebuild(plan, leaves) for plan in plans), **kwargs)


def flatten_user_arguments(
    vm: Interpreter, fn: Any, args: list[Var]
) -> tuple[Any, list[Var]] | None:
    """For a call ``fn(*args)`` of a nonstrict_trace function with user pytree objects among
    its positional arguments: a function to put in the graph instead and its flat arguments.
    None when no argument is such an object."""
    if not any(_user_class(a) is not None for a in args):
        return None
    leaves: list[Var] = []
    plans = [_flatten(vm, a, leaves) for a in args]

    def target(*flat: Any, **kwargs: Any) -> Any:
        return _call_rebuilt(fn, plans, *flat, **kwargs)

    functools.update_wrapper(target, fn, updated=())
    return target, leaves
