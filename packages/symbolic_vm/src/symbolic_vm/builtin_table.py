"""The ``@implements`` table: the VM's own implementation of a builtin or library function,
looked up by the function's identity when a traced call reaches it (builtins_ and the families
beside it fill it for Python's builtins, stdlib/ for the standard library)."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import TYPE_CHECKING

from symbolic_vm.values import ObjectVar, Var

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter


BuiltinImpl = Callable[["Interpreter", list[Var], dict[str, Var]], Var]
_IMPLS: dict[object, BuiltinImpl] = {}
_KEEP: list[object] = []
# Implementations for every instance of a type (functools' lru_cache wrappers): see stdlib/.
_TYPE_IMPLS: dict[
    type, Callable[[Interpreter, ObjectVar, list[Var], dict[str, Var]], Var | None]
] = {}


def _key(fn: object) -> object:
    """The table key of ``fn``: its identity, or for a C class method (``dict.fromkeys``,
    ``itertools.chain.from_iterable``: a new bound object on every read) its class and name."""
    owner = getattr(fn, "__self__", None)
    if isinstance(fn, types.BuiltinMethodType) and isinstance(owner, type):
        return (id(owner), fn.__name__)
    return id(fn)


def implements(*fns: object) -> Callable[[BuiltinImpl], BuiltinImpl]:
    """Register the VM's implementation of builtin ``fns``."""

    def register(impl: BuiltinImpl) -> BuiltinImpl:
        for fn in fns:
            _IMPLS[_key(fn)] = impl
            _KEEP.append(fn)
        return impl

    return register


def implementation(fn: object) -> BuiltinImpl | None:
    """The VM's own implementation of ``fn`` registered with ``@implements``, if any."""
    return _IMPLS.get(_key(fn))

