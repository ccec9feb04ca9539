"""Class statements inside the compiled frame (``LOAD_BUILD_CLASS``; ``builtins.__build_class__``).

A class body is run for real at trace time when it cannot change anything outside the class it
makes: its bytecode only binds names to constants, functions made from its code, and the
results of ``staticmethod``/``classmethod``/``property`` (and a property's ``setter``/
``getter``/``deleter``) on them, and writes its annotations. The bases and metaclass must run no
user hook (``type`` or ``abc.ABCMeta``, no ``__init_subclass__`` of a base). The class is then
an ordinary class to the trace: instances are made with ``__init__`` inlined, methods inline
with the trace's own closure cells (``made_classes``). Globals the body read are guarded.

Eager makes a new class on every call, so the class never reaches the transformed code: if it,
an instance or a method of it leaves the frame, the capture breaks at the class statement
instead (``made_classes.ClassEscapes``). ``@dataclasses.dataclass`` on such a class runs for
real too (it only changes the class it is given).

A body that does anything else breaks at the statement, as torch.compile 2.13 (its
``enable_trace_load_build_class`` is off by default) breaks at every class statement.
"""

from __future__ import annotations

import abc
import builtins
import dataclasses
import dis
import functools
import sys
import types
from typing import TYPE_CHECKING, Any

from symbolic_vm import operations as ops
from symbolic_vm.builtin_table import implements
from symbolic_vm.errors import Unsupported
from symbolic_vm.made_classes import made_classes
from symbolic_vm.values import (
    ConstVar,
    FunctionVar,
    NestedFunctionVar,
    ObjectVar,
    PartialVar,
    Var,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter

__all__: list[str] = []

# Callables a body may call: each only wraps the function it is given.
_WRAPPERS: tuple[object, ...] = (
    staticmethod, classmethod, property, functools.cached_property, abc.abstractmethod,
)
_PROPERTY_CHAIN = frozenset({"setter", "getter", "deleter"})
_METACLASSES: tuple[type, ...] = (type, abc.ABCMeta)
_SILENT = frozenset({
    "RESUME", "NOP", "CACHE", "PRECALL", "KW_NAMES", "COPY_FREE_VARS", "MAKE_CELL",
    "SETUP_ANNOTATIONS", "EXTENDED_ARG",
})
_NULL = ("null",)
_OTHER = ("other",)
_CONST = ("const",)


class _Refused(Exception):
    pass


def _body_reads(code: types.CodeType, f_globals: dict[str, Any], f_builtins: dict[str, Any]
                ) -> tuple[set[str], set[str]]:
    """The global names and the free variables ``code`` (a class body) reads; raises _Refused
    when the body could do anything but bind its names (see the module doc).

    Each stack slot carries what it holds: NULL, a constant, a function made here, a wrapper
    (above), a name the body bound, a real value read from globals, or anything else. Only
    calls of a wrapper (or a property's setter/getter/deleter) are allowed.
    """
    # Names the body has bound so far: the allowed bytecode never jumps, so instruction order
    # is run order, and a name read before its store (``x = x``) is the global's.
    stored: set[str] = set()
    reads: set[str] = set()
    free: set[str] = set()
    stack: list[tuple[Any, ...]] = []
    version = sys.version_info[:2]

    def resolve(name: str, *, body: bool) -> tuple[Any, ...]:
        if body and name in stored:
            return ("body", name)
        if body and name == "__name__":
            return _CONST
        if name == "__annotations__":
            return ("annotations",)
        if name in f_globals:
            reads.add(name)
            return ("value", f_globals[name])
        if name in f_builtins:
            return ("value", f_builtins[name])
        raise _Refused(f"name {name!r} is not defined")

    def pop(n: int = 1) -> list[tuple[Any, ...]]:
        if n > len(stack):
            raise _Refused("stack underflow")
        taken = stack[len(stack) - n:]
        del stack[len(stack) - n:]
        return taken

    def callable_ok(label: tuple[Any, ...]) -> bool:
        if label[0] == "wrapper":
            return True
        return label[0] == "value" and any(label[1] is w for w in _WRAPPERS)

    for inst in dis.get_instructions(code):
        op, arg = inst.opname, inst.arg or 0
        if op in _SILENT:
            continue
        if op == "LOAD_NAME":
            stack.append(resolve(inst.argval, body=True))
        elif op == "LOAD_GLOBAL":
            found = resolve(inst.argval, body=False)
            if arg & 1 and version < (3, 13):
                stack.append(_NULL)
            stack.append(found)
            if arg & 1 and version >= (3, 13):
                stack.append(_NULL)
        elif op == "LOAD_CONST":
            stack.append(("code",) if isinstance(inst.argval, types.CodeType) else _CONST)
        elif op == "PUSH_NULL":
            stack.append(_NULL)
        elif op in ("LOAD_CLOSURE", "LOAD_LOCALS") or (
            # 3.13 spells LOAD_CLOSURE (a cell, for a method's closure tuple) LOAD_FAST
            op == "LOAD_FAST" and inst.argval in code.co_cellvars + code.co_freevars
        ):
            stack.append(_OTHER)
        elif op in ("LOAD_DEREF", "LOAD_CLASSDEREF", "LOAD_FROM_DICT_OR_DEREF"):
            if op == "LOAD_FROM_DICT_OR_DEREF":
                pop()
            free.add(inst.argval)
            stack.append(_OTHER)
        elif op in {"STORE_NAME", "POP_TOP", "RETURN_VALUE"}:
            pop()
            if op == "STORE_NAME":
                stored.add(inst.argval)
        elif op == "RETURN_CONST":
            pass
        elif op == "LOAD_ATTR":
            (base,) = pop()
            attr = inst.argval
            if base[0] == "body" and attr in _PROPERTY_CHAIN:
                label: tuple[Any, ...] = ("wrapper",)
            elif base[0] == "value" and isinstance(base[1], types.ModuleType):
                member: object = getattr(base[1], attr, None)
                # read without a guard: only a wrapper (functools.cached_property), a class or a
                # module (annotations), never a value the class would keep
                if not (
                    any(member is w for w in _WRAPPERS)
                    or isinstance(member, (type, types.ModuleType))
                ):
                    raise _Refused(f"reading module attribute {attr!r} in the class body")
                label = ("value", member)
            else:
                raise _Refused(f"reading attribute {attr!r} in the class body")
            if version >= (3, 12) and arg & 1:  # the method form: (callable, NULL)
                stack.extend([label, _NULL])
            else:
                stack.append(label)
        elif op == "MAKE_FUNCTION":
            flags = 0 if version >= (3, 13) else arg
            pop(1 + bin(flags & 0x0F).count("1"))
            stack.append(("function",))
        elif op == "SET_FUNCTION_ATTRIBUTE":
            pop(2)
            stack.append(("function",))
        elif op == "BUILD_TUPLE":
            items = pop(arg)
            stack.append(_CONST if all(i == _CONST for i in items) else _OTHER)
        elif op == "BUILD_CONST_KEY_MAP":
            pop(arg + 1)
            stack.append(_OTHER)
        elif op == "COPY":
            if arg > len(stack):
                raise _Refused("stack underflow")
            stack.append(stack[-arg])
        elif op == "SWAP":
            stack[-1], stack[-arg] = stack[-arg], stack[-1]
        elif op == "CALL":
            taken = pop(arg + 2)
            callee = taken[1] if taken[0] == _NULL else taken[0]
            if not callable_ok(callee):
                raise _Refused("a call in the class body")
            stack.append(("wrapped",))
        elif op == "STORE_SUBSCR":
            _value, target, _key = pop(3)
            if target != ("annotations",):
                raise _Refused("an item assignment in the class body")
        else:
            raise _Refused(f"{op} in the class body")
    return reads, free


def _real(var: Var | None) -> tuple[bool, object]:
    """(True, the real value) for a var that stands for one real object."""
    if isinstance(var, ConstVar):
        return True, var.value
    if isinstance(var, ObjectVar):
        return True, var.value
    if isinstance(var, FunctionVar):
        return True, var.fn
    return False, None


@implements(builtins.__build_class__)
def _build_class(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    out = vm.out
    if len(args) < 2 or not isinstance(args[0], NestedFunctionVar):
        raise Unsupported("__build_class__ called other than by a class statement")
    body, name = args[0], ops.const_value(out, args[1])
    if not isinstance(name, str):
        raise Unsupported("__build_class__ with a non-string name")
    bases: list[type] = []
    for base in args[2:]:
        if not (isinstance(base, ObjectVar) and isinstance(base.value, type)):
            raise Unsupported(f"class {name}: a base that is not a class from the frame's globals")
        out.depend(base)
        bases.append(base.value)
    keywords: dict[str, Any] = {}
    for key, var in kwargs.items():
        if not (isinstance(var, ObjectVar | ConstVar)):
            raise Unsupported(f"class {name}: keyword {key!r} is not a constant")
        out.depend(var)
        keywords[key] = var.value
    metaclass = keywords.get("metaclass")
    if metaclass is None:
        metaclass = type(bases[0]) if bases else type
    hooked = [
        k.__qualname__ for b in bases for k in b.__mro__
        if k is not object and "__init_subclass__" in vars(k)
    ]
    if metaclass not in _METACLASSES or any(type(b) not in _METACLASSES for b in bases) or hooked:
        raise Unsupported(f"class {name}: its metaclass or a base's __init_subclass__ runs user "
                          "code when the class is made (the class statement runs as Python)")
    if set(keywords) - {"metaclass"}:
        raise Unsupported(f"class {name}: class keywords go to __init_subclass__")
    try:
        reads, free = _body_reads(body.code, body.f_globals, vm.f_builtins)
    except _Refused as why:
        raise Unsupported(f"class {name}: {why} (the class statement runs as Python)") from None
    for global_name in sorted(reads):
        if body.f_globals is out.f_globals and global_name in out.global_overlay:
            raise Unsupported(f"class {name}: its body reads global {global_name!r}, which the "
                              "compiled function changed")
        out.depend(vm.load_global(global_name))
    made = made_classes(out)
    cells = []
    for cell_name, cell in zip(body.code.co_freevars, body.closure, strict=True):
        # Methods read and write the trace's cell through this one (made_classes); only a
        # body that reads the variable itself needs its value now (guarded, as any read).
        real = made.real_cell(cell)
        if cell_name in free:
            known, value = _real(cell.value)
            if not known or cell.value is None:
                raise Unsupported(f"class {name}: its body reads {cell_name!r}, which holds a "
                                  "value made in the trace (the class statement runs as Python)")
            out.depend(cell.value)
            real.cell_contents = value
        cells.append(real)
    function = types.FunctionType(body.code, body.f_globals, name, None, tuple(cells) or None)
    try:
        cls = builtins.__build_class__(function, name, *bases, **keywords)
    except Exception as exc:  # eager raises it on every call: let eager raise it
        raise Unsupported(f"class {name}: its statement raises {type(exc).__name__}") from None
    root = vm.root_frame()
    made.steps[cls] = (root.steps, root.code.co_filename, root.lineno)
    return ObjectVar(cls)


_DATACLASS_OPTIONS = frozenset(
    {"init", "repr", "eq", "order", "unsafe_hash", "frozen", "match_args", "kw_only", "slots"}
)


@implements(dataclasses.dataclass)
def _dataclass(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """``@dataclasses.dataclass`` (with constant options) on a class made in the trace: run for
    real, as it only changes (or, with ``slots``, remakes) the class it is given."""
    out = vm.out
    options = {k: ops.const_value(out, v) for k, v in kwargs.items()}
    if set(options) - _DATACLASS_OPTIONS:
        raise Unsupported(f"dataclasses.dataclass with options {sorted(options)}")
    if not args:
        return PartialVar(ObjectVar(dataclasses.dataclass), (), dict(kwargs))
    made = made_classes(out)
    target = args[0]
    if len(args) != 1 or not (
        isinstance(target, ObjectVar) and isinstance(target.value, type)
        and target.value in made.steps
    ):
        raise Unsupported("dataclasses.dataclass on a class from outside the compiled function")
    try:
        cls: type = dataclasses.dataclass(target.value, **options)
    except Exception as exc:
        raise Unsupported(f"dataclasses.dataclass raises {type(exc).__name__}") from None
    made.steps.setdefault(cls, made.steps[target.value])
    return ObjectVar(cls)
