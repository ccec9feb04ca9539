"""Exceptions inside the traced code: ``raise``, ``try``/``except``/``else``/``finally``, ``with``.

An exception the traced program raises (a ``raise`` statement, or a builtin failing on tracked
values: a missing dict key, an index out of range, ``next()`` on an exhausted iterator, a
missing attribute) is a ``TracedException`` carrying the exception object as a tracked value.
The interpreter looks the failing instruction up in its code's exception table, as CPython
does: the stack is cut to the handler's depth, the exception pushed and the handler run
(``PUSH_EXC_INFO``, ``CHECK_EXC_MATCH``, ``POP_EXCEPT``, ``RERAISE``, ``WITH_EXCEPT_START``
below). With no handler it leaves the inlined frame and is looked up again at the caller's
call instruction. One that would leave the compiled frame is ``Unsupported`` there: that
instruction then runs eagerly at a graph break (or the frame does), which raises the same
exception, with eager's type, args and ``__cause__``, after eager's side effects.

Exception objects are real instances made from constant arguments (``KeyError('k')``); their
class's ``__init__`` ran eagerly on constants, as when they are made anywhere else.
"""

from __future__ import annotations

import dis
from typing import TYPE_CHECKING

from symbolic_vm.calls import call
from symbolic_vm.errors import TracedException, Unsupported, leaving_generator
from symbolic_vm.interpreter import Interpreter, handler
from symbolic_vm.values import ConstVar, ObjectVar, TupleVar, Var

if TYPE_CHECKING:
    from collections.abc import Sequence


def exception_value(vm: Interpreter, value: Var) -> ObjectVar:
    """The exception object ``raise value`` raises (a class is called without arguments)."""
    cls = value.value if isinstance(value, ObjectVar) else None
    if isinstance(cls, type) and issubclass(cls, BaseException):
        vm.out.depend(value)
        return ObjectVar(cls())
    if isinstance(value, ObjectVar) and isinstance(value.value, BaseException):
        return value
    raise Unsupported("raise of something that is not an exception object the VM made")


def _matches(vm: Interpreter, exc: Var, classes: Var) -> bool:
    if not isinstance(exc, ObjectVar):
        raise Unsupported("except clause on an exception the VM does not hold")
    targets: Sequence[Var] = classes.items if isinstance(classes, TupleVar) else (classes,)
    wanted: list[type] = []
    for target in targets:
        if not (isinstance(target, ObjectVar) and isinstance(target.value, type)):
            raise Unsupported("except clause naming something that is not a class")
        vm.out.depend(target)
        wanted.append(target.value)
    return isinstance(exc.value, tuple(wanted))


@handler("RAISE_VARARGS")
def RAISE_VARARGS(vm: Interpreter, inst: dis.Instruction) -> None:
    if inst.arg == 0:
        current = vm.handling
        if current is None:
            raise Unsupported("bare raise with no exception being handled")
        raise TracedException(current)
    cause = vm.pop() if inst.arg == 2 else None
    exc = exception_value(vm, vm.pop())
    if cause is not None:
        if isinstance(cause, ConstVar) and cause.value is None:
            exc.value.__cause__ = None
        else:
            exc.value.__cause__ = exception_value(vm, cause).value
        exc.value.__suppress_context__ = True
    elif vm.handling is not None and vm.handling.value is not exc.value:
        exc.value.__context__ = vm.handling.value
    raise TracedException(exc)


def stopiteration_error(vm: Interpreter, exc: Var) -> Var:
    """``CALL_INTRINSIC_1 INTRINSIC_STOPITERATION_ERROR`` (3.12+), the handler around every
    generator body: a StopIteration leaving the body becomes a RuntimeError caused by it (PEP
    479); any other exception passes through unchanged (GeneratorExit when one is closed)."""
    if not isinstance(exc, ObjectVar) or not isinstance(exc.value, BaseException):
        raise Unsupported("an exception the VM does not hold left a generator")
    error = leaving_generator(exc.value, vm.code.co_flags)
    return exc if error is exc.value else ObjectVar(error)


@handler("PUSH_EXC_INFO")
def PUSH_EXC_INFO(vm: Interpreter, inst: dis.Instruction) -> None:
    exc = vm.pop()
    vm.push(vm.handling if vm.handling is not None else ConstVar(None))
    vm.push(exc)
    if not isinstance(exc, ObjectVar):
        raise Unsupported("an exception the VM does not hold reached an except block")
    vm.handling = exc


@handler("POP_EXCEPT")
def POP_EXCEPT(vm: Interpreter, inst: dis.Instruction) -> None:
    previous = vm.pop()
    vm.handling = previous if isinstance(previous, ObjectVar) else None


@handler("CHECK_EXC_MATCH")
def CHECK_EXC_MATCH(vm: Interpreter, inst: dis.Instruction) -> None:
    classes = vm.pop()
    vm.push(ConstVar(_matches(vm, vm.peek(), classes)))


@handler("RERAISE")
def RERAISE(vm: Interpreter, inst: dis.Instruction) -> None:
    exc = vm.pop()
    if inst.arg:
        vm.pop()  # lasti: where the exception happened (the VM needs no f_lasti)
    if not isinstance(exc, ObjectVar):
        raise Unsupported("re-raising an exception the VM does not hold")
    raise TracedException(exc)


@handler("WITH_EXCEPT_START")
def WITH_EXCEPT_START(vm: Interpreter, inst: dis.Instruction) -> None:
    exc = vm.peek()
    exit_fn = vm.peek(4)
    if not isinstance(exc, ObjectVar):
        raise Unsupported("an exception the VM does not hold reached a with block's exit")
    kind = ObjectVar(type(exc.value))
    vm.push(call(vm, exit_fn, [kind, exc, ConstVar(None)], {}))


@handler("LOAD_ASSERTION_ERROR")
def LOAD_ASSERTION_ERROR(vm: Interpreter, inst: dis.Instruction) -> None:
    vm.push(ObjectVar(AssertionError))


__all__ = ["exception_value"]
