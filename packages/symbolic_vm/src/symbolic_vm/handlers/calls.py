"""Calls and function creation."""

from __future__ import annotations

import dis
import types

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


@handler("KW_NAMES")
def KW_NAMES(vm: Interpreter, inst: dis.Instruction) -> None:
    assert inst.arg is not None
    vm.kw_names = tuple(vm.code.co_consts[inst.arg])


@handler("CALL")
def CALL(vm: Interpreter, inst: dis.Instruction) -> None:
    assert inst.arg is not None
    kw_names = vm.take_kw_names()
    args = vm.popn(inst.arg)
    second = vm.pop()
    first = vm.pop()
    if isinstance(first, NullVar):
        fn = second
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
    if vm.stack and isinstance(vm.peek(), NullVar):
        vm.pop()
    args = ops.iterate(vm.out, args_var)
    kwargs: dict[str, Var] = {}
    if kwargs_var is not None:
        if not isinstance(kwargs_var, DictVar):
            raise Unsupported("**kwargs that is not a dict")
        vm.out.depend(kwargs_var)
        kwargs = {str(k): v for k, v in kwargs_var.box.items.items()}
    vm.push(call(vm, fn, args, kwargs))


@handler("MAKE_FUNCTION")
def MAKE_FUNCTION(vm: Interpreter, inst: dis.Instruction) -> None:
    assert inst.arg is not None
    code_var = vm.pop()
    code = code_var.value if isinstance(code_var, (ObjectVar, ConstVar)) else None
    if not isinstance(code, types.CodeType):
        raise Unsupported("MAKE_FUNCTION without a code object")
    flags = inst.arg
    closure: tuple[CellVar, ...] = ()
    if flags & 0x08:
        closure_var = vm.pop()
        assert isinstance(closure_var, TupleVar)
        closure = tuple(c for c in closure_var.items if isinstance(c, CellVar))
    if flags & 0x04:
        vm.pop()  # annotations are not needed to run the function
    kwdefaults: dict[str, Var] = {}
    if flags & 0x02:
        kw_var = vm.pop()
        assert isinstance(kw_var, DictVar)
        kwdefaults = {str(k): v for k, v in kw_var.box.items.items()}
    defaults: tuple[Var, ...] = ()
    if flags & 0x01:
        defaults_var = vm.pop()
        defaults = tuple(ops.items(vm.out, defaults_var))
    vm.push(
        NestedFunctionVar(
            code, vm.f_globals, defaults, kwdefaults, tuple(c.cell for c in closure)
        )
    )
