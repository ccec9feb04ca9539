"""Calls and function creation."""

from __future__ import annotations

import dis
import types

import attrs

from symbolic_vm import operations as ops
from symbolic_vm.calls import call
from symbolic_vm.errors import Unsupported
from symbolic_vm.interpreter import Interpreter, handler
from symbolic_vm.values import (
    CellVar,
    ConstVar,
    DictVar,
    NestedFunctionVar,
    NullVar,
    ObjectVar,
    TupleVar,
    Var,
)


@handler("KW_NAMES", versions=(3.11, 3.12))
def KW_NAMES(vm: Interpreter, inst: dis.Instruction) -> None:
    assert inst.arg is not None
    vm.kw_names = tuple(vm.code.co_consts[inst.arg])


@handler("CALL")
def CALL(vm: Interpreter, inst: dis.Instruction) -> None:
    assert inst.arg is not None
    _call(vm, inst.arg, vm.take_kw_names())


@handler("CALL_KW", versions=(3.13,))
def CALL_KW(vm: Interpreter, inst: dis.Instruction) -> None:
    """3.13: the keyword names are a constant tuple on top of the arguments."""
    assert inst.arg is not None
    names = ops.const_value(vm.out, vm.pop())
    assert isinstance(names, tuple)
    _call(vm, inst.arg, tuple(str(name) for name in names))


def _call(vm: Interpreter, argc: int, kw_names: tuple[str, ...]) -> None:
    """Pop ``argc`` arguments and the two slots below them, call, push the result.

    The slots are [NULL, callable] or [method, self] on 3.11/3.12 and [callable, NULL] or
    [callable, self] on 3.13.
    """
    args = vm.popn(argc)
    second = vm.pop()
    first = vm.pop()
    if isinstance(first, NullVar):
        fn = second
    elif isinstance(second, NullVar):
        fn = first
    else:  # [method, self, args...] or [callable, first-arg, args...]
        fn = first
        args = [second, *args]
    kwargs: dict[str, Var] = {}
    if kw_names:
        kwargs = dict(zip(kw_names, args[-len(kw_names) :], strict=True))
        args = args[: -len(kw_names)]
    vm.push(call(vm, fn, args, kwargs))


@handler("CALL_FUNCTION_EX")
def CALL_FUNCTION_EX(vm: Interpreter, inst: dis.Instruction) -> None:
    assert inst.arg is not None
    kwargs_var = vm.pop() if inst.arg & 1 else None
    args_var = vm.pop()
    fn = vm.pop()
    if isinstance(fn, NullVar):  # 3.13: [callable, NULL, args, kwargs?]
        fn = vm.pop()
    elif vm.stack and isinstance(vm.peek(), NullVar):  # 3.11/3.12: [NULL, callable, ...]
        vm.pop()
    args = ops.iterate(vm.out, args_var)
    kwargs: dict[str, Var] = {}
    if kwargs_var is not None:
        if not isinstance(kwargs_var, DictVar):
            raise Unsupported("**kwargs that is not a dict")
        vm.out.depend(kwargs_var)
        kwargs = {str(k): v for k, v in kwargs_var.box.items.items()}
    vm.push(call(vm, fn, args, kwargs))


@handler("MAKE_FUNCTION", versions=(3.11, 3.12))
def MAKE_FUNCTION(vm: Interpreter, inst: dis.Instruction) -> None:
    assert inst.arg is not None
    code = _code_of(vm.pop())
    flags = inst.arg
    closure: tuple[CellVar, ...] = ()
    if flags & 0x08:
        closure = _closure_of(vm.pop())
    annotations = vm.pop() if flags & 0x04 else None  # read only as __annotations__
    kwdefaults: dict[str, Var] = {}
    if flags & 0x02:
        kwdefaults = _kwdefaults_of(vm.pop())
    defaults: tuple[Var, ...] = ()
    if flags & 0x01:
        defaults = tuple(ops.items(vm.out, vm.pop()))
    vm.push(
        NestedFunctionVar(
            code, vm.f_globals, defaults, kwdefaults, tuple(c.cell for c in closure),
            annotations=annotations,
        )
    )


@handler("MAKE_FUNCTION", versions=(3.13,))
def MAKE_FUNCTION_313(vm: Interpreter, inst: dis.Instruction) -> None:
    """3.13: a bare function from a code object; SET_FUNCTION_ATTRIBUTE adds the rest."""
    vm.push(NestedFunctionVar(_code_of(vm.pop()), vm.f_globals, (), {}, ()))


@handler("SET_FUNCTION_ATTRIBUTE", versions=(3.13,))
def SET_FUNCTION_ATTRIBUTE(vm: Interpreter, inst: dis.Instruction) -> None:
    assert inst.arg is not None
    fn = vm.pop()
    value = vm.pop()
    assert isinstance(fn, NestedFunctionVar)
    flag = inst.arg
    if flag == 0x08:
        fn = attrs.evolve(fn, closure=tuple(c.cell for c in _closure_of(value)))
    elif flag == 0x02:
        fn = attrs.evolve(fn, kwdefaults=_kwdefaults_of(value))
    elif flag == 0x01:
        fn = attrs.evolve(fn, defaults=tuple(ops.items(vm.out, value)))
    elif flag == 0x04:
        fn = attrs.evolve(fn, annotations=value)  # read only as __annotations__
    vm.push(fn)


def _code_of(var: Var) -> types.CodeType:
    code = var.value if isinstance(var, (ObjectVar, ConstVar)) else None
    if not isinstance(code, types.CodeType):
        raise Unsupported("MAKE_FUNCTION without a code object")
    return code


def _closure_of(var: Var) -> tuple[CellVar, ...]:
    assert isinstance(var, TupleVar)
    return tuple(c for c in var.items if isinstance(c, CellVar))


def _kwdefaults_of(var: Var) -> dict[str, Var]:
    assert isinstance(var, DictVar)
    return {str(k): v for k, v in var.box.items.items()}
