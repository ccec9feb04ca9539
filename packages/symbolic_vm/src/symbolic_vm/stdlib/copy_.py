"""``copy.copy`` and ``copy.deepcopy`` on tracked values, as CPython's ``copy`` module runs them.

Containers made in the frame or read from it are copied item by item (immutable constants are
their own copy); a user object with the default reduction (no ``__deepcopy__``/``__copy__``,
``__reduce_ex__``/``__reduce__``/``__getstate__`` of ``object``, no ``__setstate__``, no
``__slots__``, ``object.__new__``) becomes a new object made while tracing whose ``__dict__``
holds the copied state (Hugging Face's ``copy.deepcopy(config)``). The attribute lookups
CPython makes on the original and on the copy go through the class's own ``__getattribute__``
or ``__getattr__`` here too, so user hooks run as often as in eager. Anything else (tensors that
need grad, modules, a memo argument of the program's own) is Unsupported: a clean break. A
user ``__deepcopy__(memo)``/``__copy__()`` is traced as a call; the memo it gets is the copy
call's own, so ``copy.deepcopy(part, memo)`` inside it continues that call.
"""

from __future__ import annotations

import copy
import copyreg
import enum
import types
from typing import TYPE_CHECKING, Any

import attrs

from guards import TypeSource
from symbolic_vm import operations as ops
from symbolic_vm import type_trackers
from symbolic_vm.attr_stores import MISSING, class_lookup
from symbolic_vm.builtin_table import implements
from symbolic_vm.errors import TracedException, Unsupported
from symbolic_vm.guard_api import InstanceAttrSource
from symbolic_vm.type_trackers import user_class
from symbolic_vm.values import (
    ConstVar,
    DictBox,
    DictVar,
    FunctionVar,
    ListBox,
    ListVar,
    NestedFunctionVar,
    NewObjectVar,
    ObjectBox,
    ObjectVar,
    PartialVar,
    SetBox,
    SetVar,
    SymVar,
    TensorVar,
    TupleVar,
    Var,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter

# The attribute lookups copy.deepcopy/copy.copy make on a plain object x and its copy y
# (CPython 3.11-3.13, through type(x).__getattribute__): measured with a logging
# __getattribute__ (tests/test_stdlib_copy.py checks the count against eager).
_DEEP_LOOKUPS_ON_ORIGINAL = ("__deepcopy__", "__reduce_ex__", "__reduce__", "__getstate__")
_SHALLOW_LOOKUPS_ON_ORIGINAL = ("__reduce_ex__", "__reduce__", "__getstate__")
_LOOKUPS_ON_COPY = ("__setstate__", "__dict__")

# What object's default reduction needs the class to leave alone.
_DEFAULT_SLOTS = {
    "__reduce_ex__": object.__reduce_ex__,
    "__reduce__": object.__reduce__,
    "__getstate__": getattr(object, "__getstate__", MISSING),
}
_ABSENT = ("__setstate__", "__getnewargs_ex__", "__getnewargs__", "__copy__", "__deepcopy__")


@implements(copy.deepcopy)
def _deepcopy(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    memo = args[1] if len(args) == 2 else kwargs.get("memo") if len(args) == 1 else None
    given = len(args) + len(kwargs) == 2
    if given and isinstance(memo, DictVar) and isinstance(memo.box, _MemoBox):
        # A user __deepcopy__ passing on the memo deepcopy gave it: the same copy call.
        copier = memo.box.copier
        assert isinstance(copier, _Copier)
        return copier.copy(args[0])
    if len(args) != 1 or kwargs:
        raise Unsupported("copy.deepcopy with a memo argument of its own")
    return _Copier(vm, deep=True).copy(args[0])


@attrs.define(eq=False)
class _MemoBox(DictBox):
    """The memo deepcopy hands a user ``__deepcopy__(memo)``: the copy call's own memo (keyed
    by what makes two tracked values one object), so a ``copy.deepcopy(part, memo)`` inside
    continues the same call (aliases and cycles copied once)."""

    copier: Any = None


@implements(copy.copy)
def _copy(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if len(args) != 1 or kwargs:
        raise Unsupported("copy.copy with extra arguments")
    return _Copier(vm, deep=False).copy(args[0])


def _atomic(value: object) -> bool:
    """A value copy.deepcopy returns as itself (or as an equal immutable value)."""
    if copy._deepcopy_dispatch.get(type(value)) is copy._deepcopy_atomic:  # type: ignore[attr-defined]
        return True
    return isinstance(value, enum.Enum) and class_lookup(type(value), "__deepcopy__") is getattr(
        enum.Enum, "__deepcopy__", None
    )


class _Copier:
    """One copy.copy/deepcopy call: the memo maps each copied mutable (by its box or object
    identity) to its copy, so aliasing and cycles come out as in eager."""

    def __init__(self, vm: Interpreter, *, deep: bool) -> None:
        self.vm = vm
        self.deep = deep
        self.memo_box = _MemoBox({}, copier=self)
        self.memo: dict[Any, Var] = self.memo_box.items

    def copy(self, var: Var) -> Var:
        key = _identity(var)
        if key is not None and key in self.memo:
            return self.memo[key]
        return self._copy(var, key)

    def _item(self, var: Var) -> Var:
        return self.copy(var) if self.deep else var

    def _copy(self, var: Var, key: int | None) -> Var:
        out = self.vm.out
        if isinstance(var, (ConstVar, SymVar, FunctionVar, NestedFunctionVar)):
            return var  # immutable: deepcopy gives the value itself or an equal one
        if isinstance(var, TupleVar):
            if not self.deep:
                return var
            items = tuple(self.copy(v) for v in var.items)
            if all(a is b for a, b in zip(items, var.items, strict=True)):
                return var
            return TupleVar(items, fields=var.fields, named_type=var.named_type)
        if isinstance(var, ListVar):
            copied = ListVar(ListBox([]))
            self._remember(key, copied)
            copied.box.items.extend(self._item(v) for v in ops.items(out, var))
            return copied
        if isinstance(var, DictVar):
            out.depend(var)
            new = DictVar(DictBox({}))
            self._remember(key, new)
            new.box.items.update({k: self._item(v) for k, v in var.box.items.items()})
            return new
        if isinstance(var, SetVar):
            out.depend(var)
            return SetVar(SetBox(set(var.box.items)))
        if isinstance(var, PartialVar):
            return PartialVar(
                self._item(var.func), tuple(self._item(a) for a in var.args),
                {k: self._item(v) for k, v in var.kwargs.items()},
            )
        if isinstance(var, TensorVar):
            return self._tensor(var)
        if isinstance(var, ObjectVar) and _atomic(var.value):
            out.depend(var)
            return var
        if isinstance(var, (ObjectVar, NewObjectVar)) and user_class(var) is not None:
            hooked = self._user_hook(var, key)
            return hooked if hooked is not None else self._object(var, key)
        raise Unsupported(f"copy.{'deep' if self.deep else ''}copy of {ops.describe(var)}")

    def _remember(self, key: int | None, copied: Var) -> None:
        if key is not None:
            self.memo[key] = copied

    def _tensor(self, var: TensorVar) -> Var:
        # Tensor.__deepcopy__ clones; a tensor from the frame may carry a .grad or attributes
        # the fake value does not show, and one that needs grad is a new leaf (or an error).
        if not self.deep:
            raise Unsupported("copy.copy of a tensor")
        if var.source is not None or var.example.requires_grad:
            raise Unsupported("copy.deepcopy of an input tensor or of one that requires grad")
        return ops.graph_method(self.vm.out, "clone", [var], {})

    def _user_hook(self, var: Var, key: int | None) -> Var | None:
        """The class's own ``__deepcopy__(memo)`` (read from the instance, as deepcopy reads
        it) or ``__copy__()`` (read from the class, as copy.copy does), traced as a call; the
        copy is remembered unless it is the object itself. None: the class has neither."""
        cls = user_class(var)
        assert cls is not None
        name = "__deepcopy__" if self.deep else "__copy__"
        hook = class_lookup(cls, name)
        if hook is MISSING:
            return None
        if not isinstance(hook, types.FunctionType) or (
            self.deep and type_trackers.attribute_hooks(var)
        ):
            raise Unsupported(f"copy of a {cls.__name__} through its {name} (not a plain method)")
        if isinstance(var, ObjectVar) and var.source is None:
            raise Unsupported(f"copying a {cls.__name__} the guards cannot name")
        method = type_trackers.python_method(self.vm, var, name)
        assert method is hook
        args = [DictVar(self.memo_box)] if self.deep else []
        copied = self.vm.call(FunctionVar(hook), [var, *args], {})
        if _identity(copied) is None or _identity(copied) != key:  # deepcopy: "if y is not x"
            self._remember(key, copied)
        return copied

    def _object(self, var: Var, key: int | None) -> Var:
        """A user object through object's default reduction: ``cls.__new__(cls)``, then the
        (copied) instance dict put into the new object's ``__dict__``."""
        vm = self.vm
        cls = user_class(var)
        assert cls is not None
        if isinstance(var, ObjectVar) and var.source is None:
            raise Unsupported(f"copying a {cls.__name__} the guards cannot name")
        refused = _refused(cls)
        if refused:
            kind = "deepcopy" if self.deep else "copy"
            raise Unsupported(f"copy.{kind} of a {cls.__name__}: {refused}")
        for name in _DEEP_LOOKUPS_ON_ORIGINAL if self.deep else _SHALLOW_LOOKUPS_ON_ORIGINAL:
            found = _hooked_lookup(vm, var, name)
            if name == "__deepcopy__" and found is not None:
                raise Unsupported(f"{cls.__name__}'s __getattribute__ answers __deepcopy__")
        if isinstance(var, NewObjectVar):
            state = DictVar(DictBox(var.box.attrs))
            cls_source = var.box.cls_source
        else:
            assert isinstance(var, ObjectVar) and var.source is not None
            vm.out.depend(var)
            raw = object.__getattribute__(var.value, "__dict__")
            state_var = vm.out.wrap(raw, InstanceAttrSource(var.source, "__dict__"))
            if not isinstance(state_var, DictVar):
                raise Unsupported(f"copying a {cls.__name__} whose __dict__ has non-constant keys")
            state = state_var
            cls_source = TypeSource(var.source)
        vm.out.depend(state)
        new = NewObjectVar(ObjectBox(cls, {}, cls_source=cls_source))
        self._remember(key, new)
        if not state.box.items:
            return new  # object.__getstate__ gives None: _reconstruct sets nothing
        if _hooked_lookup(vm, new, "__setstate__") is not None:
            raise Unsupported(f"{cls.__name__}'s __getattribute__ answers __setstate__")
        target = _hooked_lookup(vm, new, "__dict__", dict_of=new)
        if not (isinstance(target, DictVar) and target.box.items is new.box.attrs):
            raise Unsupported(f"{cls.__name__}'s __getattribute__ answers __dict__ otherwise")
        copied = {k: self._item(v) for k, v in state.box.items.items()}
        new.box.attrs.update(copied)
        return new


def _identity(var: Var) -> int | None:
    """What makes two tracked values one object, for the memo."""
    if isinstance(var, (ListVar, DictVar, SetVar, NewObjectVar)):
        return id(var.box)
    if isinstance(var, ObjectVar):
        return id(var.value)
    return None


def _refused(cls: type) -> str:
    """Why ``cls`` does not copy through object's default reduction ('' when it does)."""
    if cls in copyreg.dispatch_table:
        return "registered with copyreg"
    if any(class_lookup(cls, name) is not MISSING for name in _ABSENT):
        return "its own copy/pickle protocol"
    if any(class_lookup(cls, name) is not slot for name, slot in _DEFAULT_SLOTS.items()):
        return "its own __reduce__/__getstate__"
    if any("__slots__" in k.__dict__ for k in cls.__mro__):
        return "__slots__"
    if class_lookup(cls, "__new__") is not object.__dict__["__new__"] or any(
        k.__flags__ & (1 << 9) == 0 and k is not object for k in cls.__mro__
    ):
        return "a builtin base class or its own __new__"
    return ""


def _hooked_lookup(
    vm: Interpreter, var: Var, name: str, *, dict_of: Var | None = None
) -> Var | None:
    """``getattr(var, name, None)`` as the copy module asks it: through the class's own
    ``__getattribute__``/``__getattr__`` where it has one (traced, so it runs as in eager),
    else the plain lookup (no user code runs). None: AttributeError."""
    try:
        found = type_trackers.getattr_hook(vm, var, name)
    except TracedException as raised:
        if isinstance(raised.exception, AttributeError):
            return None
        raise
    if found is not None:
        return found
    if name == "__dict__" and isinstance(dict_of, NewObjectVar):
        return DictVar(DictBox(dict_of.box.attrs))
    cls = user_class(var)
    assert cls is not None
    if name in ("__setstate__", "__deepcopy__"):
        return None if class_lookup(cls, name) is MISSING else ConstVar(True)
    return ConstVar(True)  # object's own method, checked by _refused

