"""``C[key]`` on a class from the frame whose metaclass is ``type`` (or ``abc.ABCMeta``):
neither defines ``__getitem__``, so Python calls ``C.__class_getitem__(key)``.

A Python ``__class_getitem__`` the class defines is inlined like any method (guarded as a
class attribute, so patching it recompiles). ``typing.Generic``'s (behind typing's own
cache) and the C ones of builtin classes (``list[int]``) are run at trace time on the constant
key: they only build an immutable alias.
"""

from __future__ import annotations

import abc
import types
import typing
from typing import TYPE_CHECKING, Any, cast

from symbolic_vm import operations as ops
from symbolic_vm.class_dicts import MISSING, class_lookup
from symbolic_vm.errors import Unsupported, throw
from symbolic_vm.object_attrs import guard_class_attribute
from symbolic_vm.type_trackers import CLASS_TRACKERS, TypeTracker
from symbolic_vm.values import FunctionVar, ObjectVar, Var

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter

_GENERIC = typing.Generic.__dict__["__class_getitem__"]
_FOLDED = (_GENERIC.__func__,) if isinstance(_GENERIC, classmethod) else ()


class _ClassSubscriptTracker(TypeTracker):
    def getitem(self, vm: Interpreter, obj: Var, key: Var) -> Var | None:
        if not isinstance(obj, ObjectVar) or not isinstance(obj.value, type):
            return None
        cls = obj.value
        raw = class_lookup(cls, "__class_getitem__")
        if raw is MISSING:
            return None  # eager raises TypeError: the caller's rules (a break) keep that
        vm.out.depend(obj)
        if obj.source is not None:
            guard_class_attribute(vm.out, obj.source, "__class_getitem__", raw)
        if (isinstance(raw, classmethod) and raw.__func__ in _FOLDED) or isinstance(
            raw, types.ClassMethodDescriptorType
        ):
            try:
                return vm.out.wrap(cast(Any, cls)[ops.const_value(vm.out, key)], None)
            except TypeError as exc:
                raise throw(TypeError, *exc.args) from None
        if isinstance(raw, classmethod) and isinstance(raw.__func__, types.FunctionType):
            return vm.call(FunctionVar(raw.__func__), [obj, key], {})
        raise Unsupported(f"{cls.__name__}[...] through a {type(raw).__name__} __class_getitem__")


CLASS_TRACKERS[type] = CLASS_TRACKERS[abc.ABCMeta] = _ClassSubscriptTracker()
