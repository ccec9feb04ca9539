"""nn.Module values: attributes, parameters and buffers as graph inputs, calls inline forward."""

from __future__ import annotations

import types
from typing import TYPE_CHECKING

import torch

from symbolic_vm.errors import Unsupported
from symbolic_vm.guard_api import AttrSource
from symbolic_vm.values import (
    BoundMethodVar,
    ConstVar,
    FunctionVar,
    IteratorVar,
    IterBox,
    MethodVar,
    ModuleVar,
    TupleVar,
    Var,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter


def module_attr(vm: Interpreter, obj: ModuleVar, name: str) -> Var:
    """``module.name``: parameters/buffers become inputs, submodules stay modules."""
    out = vm.out
    module = obj.module
    overlay = out.attr_overlay.get((id(module), name))
    if overlay is not None:
        return overlay
    out.depend(obj)
    source = AttrSource(obj.source, name) if obj.source is not None else None
    for table in ("_parameters", "_buffers", "_modules"):
        entries = module.__dict__.get(table, {})
        if name in entries:
            value = entries[name]
            return ConstVar(None, source=source) if value is None else out.wrap(value, source)
    if name in module.__dict__:
        return out.wrap(module.__dict__[name], source)
    if name in _MODULE_ITERATORS and name not in module.__dict__:
        return MethodVar(obj, name)
    for klass in type(module).__mro__:
        if name in klass.__dict__:
            attr = klass.__dict__[name]
            if isinstance(attr, types.FunctionType):
                return BoundMethodVar(obj, FunctionVar(attr))
            if isinstance(attr, property) and attr.fget is not None:
                from symbolic_vm.calls import call

                return call(vm, out.wrap(attr.fget, None), [obj], {})
            if isinstance(attr, staticmethod):
                return out.wrap(attr.__func__, None)
            if isinstance(attr, classmethod):
                return BoundMethodVar(out.wrap(type(module), None), out.wrap(attr.__func__, None))
            return out.wrap(attr, None)
    raise Unsupported(f"{type(module).__name__} module has no attribute {name!r}")


# Generator methods of nn.Module answered by the VM with lists of sourced values.
_MODULE_ITERATORS = frozenset({
    "modules", "children", "named_modules", "named_children", "parameters", "named_parameters",
    "buffers", "named_buffers",
})


def module_iterator(
    vm: Interpreter, obj: ModuleVar, name: str, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    """``module.parameters()`` and friends: an iterator over values named by their sources."""
    from symbolic_vm import operations as ops

    out = vm.out
    out.depend(obj)
    py_args = [ops.const_value(out, a) for a in args]
    py_kwargs = {k: ops.const_value(out, v) for k, v in kwargs.items()}
    named = name.startswith("named_")
    method = getattr(obj.module, name if named else f"named_{name}")
    entries = list(method(*py_args, **py_kwargs))
    items: list[Var] = []
    for entry_name, value in entries:
        source = obj.source
        if source is not None:
            for part in filter(None, str(entry_name).split(".")):
                source = AttrSource(source, part)
        var = out.wrap(value, source)
        items.append(TupleVar((ConstVar(entry_name), var)) if named else var)
    return IteratorVar(IterBox(items))


_HOOK_TABLES = (
    "_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
)


def _has_hooks(module: torch.nn.Module) -> bool:
    from torch.nn.modules import module as module_impl

    local = (
        module._forward_hooks, module._forward_pre_hooks, module._backward_hooks,
        getattr(module, "_backward_pre_hooks", {}),
    )
    global_hooks = (
        module_impl._global_forward_hooks, module_impl._global_forward_pre_hooks,
        module_impl._global_backward_hooks,
    )
    return any(bool(h) for h in (*local, *global_hooks))


def call_module(vm: Interpreter, obj: ModuleVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """``module(*args)``: inline its forward (modules with hooks are not supported)."""
    from symbolic_vm.calls import call

    module = obj.module
    if _has_hooks(module):
        raise Unsupported(f"calling {type(module).__name__} with forward/backward hooks registered")
    vm.out.depend(obj)
    if obj.source is not None:
        # The inlined forward ran no hooks: reuse only while the module still has none.
        where = obj.source.name()
        hooks = " or ".join(f"{where}.{table}" for table in _HOOK_TABLES)
        vm.out.predicate(f"not ({hooks})", f"{where} has no hooks")
    forward = type(module).forward
    if not isinstance(forward, types.FunctionType):
        raise Unsupported(f"{type(module).__name__}.forward is not a Python function")
    if "forward" in module.__dict__:
        return call(vm, module_attr(vm, obj, "forward"), args, kwargs)
    return call(vm, BoundMethodVar(obj, FunctionVar(forward)), args, kwargs)
