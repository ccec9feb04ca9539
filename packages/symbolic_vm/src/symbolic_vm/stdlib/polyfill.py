"""Registering standard-library models in builtin_table's tables.

``polyfill(real)``: a plain Python function the VM inlines in place of the C function ``real``,
exactly as it inlines user code (its loops, calls and generators are traced, so tensors, user
callables and side effects inside behave as in eager). A polyfill must do what ``real`` does in
the same order: consume its arguments when ``real`` does (``product`` at once, ``chain``
lazily, hence a generator), call user callables as often, and raise the same exceptions.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from symbolic_vm.builtin_table import _TYPE_IMPLS, implements
from symbolic_vm.values import FunctionVar, ObjectVar, Var

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter

F = TypeVar("F", bound=Callable[..., Any])

TypeImpl = Callable[["Interpreter", ObjectVar, list[Var], dict[str, Var]], Var | None]


def polyfill(*reals: object) -> Callable[[F], F]:
    """Register the decorated Python function as the VM's stand-in for each of ``reals``."""

    def register(py_fn: F) -> F:
        @implements(*reals)
        def run(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
            return vm.call(python_function(py_fn), args, kwargs)

        return py_fn

    return register


def python_function(fn: Callable[..., Any]) -> FunctionVar:
    """The VM's value for one of the polyfills' plain Python helpers (inlined when called)."""
    assert isinstance(fn, types.FunctionType)
    return FunctionVar(fn)


def calls_of(cls: type) -> Callable[[TypeImpl], TypeImpl]:
    """Register how calling any instance of ``cls`` (a C type) is traced (the impl answers
    None for an instance it leaves to the VM's other rules)."""

    def register(impl: TypeImpl) -> TypeImpl:
        _TYPE_IMPLS[cls] = impl
        return impl

    return register
