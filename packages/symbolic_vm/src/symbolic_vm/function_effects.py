"""Whether a custom ``torch.autograd.Function`` may become one graph node.

The graph calls ``Fn.apply``; a backend that traces the graph (aot_eager, inductor) runs
``forward`` and ``backward`` once, on fakes, and replays only their tensor work afterwards. A
Python side effect in either (``print``, appending to a global list, rebinding a global or a
closure variable) would then happen once at compile time instead of on every call, so such a
Function's ``apply`` runs eagerly at a graph break instead (torch.compile breaks there too: it
cannot trace those effects into its autograd.Function op).

The check reads bytecode, conservatively: every global, builtin and closure value the code
reads must be known to be free of effects (modules of torch and math, a list of pure
builtins, torch's functions and constants), a plain Python function it reads is checked in
turn, and any store to a global or to an outer closure cell is an effect.
"""

from __future__ import annotations

import builtins
import dis
import enum
import types
import weakref
from typing import Any

import torch

__all__ = ["python_effect"]

# Builtins that change nothing outside their arguments and the objects made in the call.
_PURE_BUILTINS = frozenset({
    "abs", "all", "any", "bool", "complex", "dict", "divmod", "enumerate", "filter", "float",
    "frozenset", "getattr", "hasattr", "int", "isinstance", "issubclass", "iter", "len", "list",
    "map", "max", "min", "next", "pow", "range", "reversed", "round", "set", "slice", "sorted",
    "str", "sum", "tuple", "type", "zip", "super", "NotImplemented", "None", "True", "False",
    "ValueError", "TypeError", "RuntimeError", "IndexError", "KeyError", "AssertionError",
    "NotImplementedError", "StopIteration", "Exception", "staticmethod", "property", "object",
})
_PURE_MODULES = frozenset({"math", "operator", "numbers", "functools", "typing"})
_CONSTANT_TYPES = (
    int, float, bool, str, bytes, complex, type(None), type(Ellipsis), torch.dtype,
    torch.device, torch.Size, torch.memory_format, torch.layout, enum.Enum,
)
_FORWARD_METHODS = ("forward", "setup_context")
_BACKWARD_METHODS = ("backward", "jvp", "vjp")
_MAX_DEPTH = 4

_VERDICTS: weakref.WeakKeyDictionary[type, dict[bool, str | None]] = (
    weakref.WeakKeyDictionary()
)


def python_effect(cls: type, *, backward: bool = True) -> str | None:
    """None when ``cls``'s forward (and, when ``backward`` may run, its backward), and what
    they call, have no Python side effect that tracing would drop; else the first one found,
    in words with its file:line. A call whose backward cannot run (grad mode off, or no
    tensor argument requiring grad) passes ``backward=False``: eager never runs it either."""
    verdicts = _VERDICTS.setdefault(cls, {})
    if backward not in verdicts:
        methods = _FORWARD_METHODS + (_BACKWARD_METHODS if backward else ())
        verdicts[backward] = _class_effect(cls, methods, set(), 0)
    return verdicts[backward]


def _class_effect(
    cls: type, methods: tuple[str, ...], seen: set[int], depth: int
) -> str | None:
    for name in methods:
        fn = _own_function(cls, name)
        if fn is not None:
            found = _function_effect(fn, seen, depth)
            if found is not None:
                return f"{cls.__name__}.{name}: {found}"
    return None


def _own_function(cls: type, name: str) -> types.FunctionType | None:
    """The user's Python function ``name`` of ``cls`` (torch's own defaults are not read)."""
    for klass in cls.__mro__:
        if name in vars(klass):
            raw = vars(klass)[name]
            fn = raw.__func__ if isinstance(raw, staticmethod | classmethod) else raw
            if isinstance(fn, types.FunctionType) and not _is_torch(fn):
                return fn
            return None
    return None


def _is_torch(obj: Any) -> bool:
    module = getattr(obj, "__module__", None) or ""
    return isinstance(module, str) and (module == "torch" or module.startswith("torch."))


def _function_effect(fn: types.FunctionType, seen: set[int], depth: int) -> str | None:
    if id(fn.__code__) in seen or _is_torch(fn):
        return None
    if depth > _MAX_DEPTH:
        return f"calls {fn.__qualname__} too deeply nested to check"
    seen.add(id(fn.__code__))
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=False))
    return _code_effect(fn.__code__, fn, cells, seen, depth, outer=True)


def _code_effect(
    code: types.CodeType,
    fn: types.FunctionType,
    cells: dict[str, Any],
    seen: set[int],
    depth: int,
    *,
    outer: bool,
) -> str | None:
    where = f"{code.co_filename}:{code.co_firstlineno}"
    line = code.co_firstlineno
    for inst in dis.get_instructions(code):
        if inst.positions is not None and inst.positions.lineno is not None:
            line = inst.positions.lineno
            where = f"{code.co_filename}:{line}"
        op = inst.opname
        if op in ("STORE_GLOBAL", "DELETE_GLOBAL", "STORE_NAME", "DELETE_NAME"):
            return f"assigns the global {inst.argval!r} ({where})"
        if op in ("STORE_DEREF", "DELETE_DEREF") and inst.argval in fn.__code__.co_freevars:
            return f"rebinds the closure variable {inst.argval!r} ({where})"
        if op == "IMPORT_NAME" and str(inst.argval).split(".")[0] not in _PURE_MODULES | {"torch"}:
            return f"imports {inst.argval} ({where})"
        value: Any
        if op in ("LOAD_GLOBAL", "LOAD_NAME"):
            name = str(inst.argval)
            if name in fn.__globals__:
                value = fn.__globals__[name]
            elif name in _PURE_BUILTINS:
                continue
            elif hasattr(builtins, name):
                return f"calls the builtin {name} ({where})"
            else:
                continue  # a NameError at run time: the graph sees it too
        elif op in ("LOAD_DEREF", "LOAD_CLASSDEREF") and outer and inst.argval in cells:
            try:
                value = cells[inst.argval].cell_contents
            except ValueError:
                continue  # an empty cell raises NameError in eager and on fakes alike
        else:
            continue
        found = _value_effect(value, str(inst.argval), where, seen, depth)
        if found is not None:
            return found
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found = _code_effect(const, fn, cells, seen, depth, outer=False)
            if found is not None:
                return found
    return None


def _value_effect(value: Any, name: str, where: str, seen: set[int], depth: int) -> str | None:
    """Reading ``value`` (a global or a closure variable): None when nothing done with it can
    change Python state outside the call."""
    if isinstance(value, types.ModuleType):
        root = value.__name__.split(".")[0]
        return None if root in _PURE_MODULES or root == "torch" else (
            f"uses the module {value.__name__} ({where})"
        )
    if isinstance(value, _CONSTANT_TYPES):
        return None
    if isinstance(value, tuple | frozenset) and all(
        isinstance(v, _CONSTANT_TYPES) for v in value
    ):
        return None
    if isinstance(value, types.FunctionType):
        return _function_effect(value, seen, depth + 1)
    if isinstance(value, type):
        if issubclass(value, torch.autograd.Function):
            return _class_effect(value, _FORWARD_METHODS + _BACKWARD_METHODS, seen, depth + 1)
        if _is_torch(value) or value.__module__ == "builtins":
            return None
        return f"uses the class {value.__qualname__} ({where})"
    if _is_torch(value) or isinstance(value, torch._ops.OpOverloadPacket | torch._ops.OpOverload):
        return None
    if isinstance(value, types.BuiltinFunctionType) and (
        getattr(value, "__module__", None) in _PURE_MODULES
    ):
        return None
    return f"reads {name}, a {type(value).__name__} it may change ({where})"
