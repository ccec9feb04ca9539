"""nn.Module values: attributes, parameters and buffers as graph inputs, calls inline forward."""

from __future__ import annotations

import types
from typing import TYPE_CHECKING

import torch

from symbolic_vm.errors import Unsupported
from symbolic_vm.guard_api import AttrSource
from symbolic_vm.values import BoundMethodVar, ConstVar, FunctionVar, ModuleVar, Var

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
    forward = type(module).forward
    if not isinstance(forward, types.FunctionType):
        raise Unsupported(f"{type(module).__name__}.forward is not a Python function")
    if "forward" in module.__dict__:
        return call(vm, module_attr(vm, obj, "forward"), args, kwargs)
    return call(vm, BoundMethodVar(obj, FunctionVar(forward)), args, kwargs)
