"""Operators: binary, unary, comparisons, identity and membership."""

from __future__ import annotations

import dis
import operator

from symbolic_vm import object_model, object_operators, type_trackers
from symbolic_vm import operations as ops
from symbolic_vm.errors import Unsupported
from symbolic_vm.interpreter import RUNNING, Interpreter, handler
from symbolic_vm.values import (
    ConstVar,
    DictVar,
    DictViewVar,
    ListBox,
    ListVar,
    TensorVar,
    TupleVar,
    Var,
)


@handler("BINARY_OP")
def BINARY_OP(vm: Interpreter, inst: dis.Instruction) -> None:
    right = vm.pop()
    left = vm.pop()
    vm.push(object_operators.binary_op(vm, inst.argrepr, left, right))


@handler("COMPARE_OP")
def COMPARE_OP(vm: Interpreter, inst: dis.Instruction) -> None:
    right = vm.pop()
    left = vm.pop()
    result = object_operators.compare_op(vm, str(inst.argval), left, right)
    if RUNNING >= (3, 13) and inst.arg is not None and inst.arg & _COERCE_TO_BOOL:
        try:
            result = ConstVar(ops.truth(vm.out, result))
        except Unsupported:
            # A tensor comparison before a branch: it stays in the graph and the branch
            # breaks it (the residual code converts with TO_BOOL), as on 3.11/3.12.
            if vm.next_instruction().opname not in _TRUTH_JUMPS:
                raise
    vm.push(result)


# 3.13: COMPARE_OP's oparg bit that makes it push bool(result), for a branch.
_COERCE_TO_BOOL = 16
_TRUTH_JUMPS = frozenset({"POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE"})


@handler("IS_OP")
def IS_OP(vm: Interpreter, inst: dis.Instruction) -> None:
    right = vm.pop()
    left = vm.pop()
    same = ops.identical(vm.out, left, right)
    vm.push(ConstVar(same != bool(inst.arg)))


@handler("CONTAINS_OP")
def CONTAINS_OP(vm: Interpreter, inst: dis.Instruction) -> None:
    container = vm.pop()
    item = vm.pop()
    vm.push(ConstVar(contains(vm, container, item) != bool(inst.arg)))


def contains(vm: Interpreter, container: Var, item: Var) -> bool:
    """``item in container``."""
    out = vm.out
    found = object_model.contains(vm, container, item)
    if found is not None:
        return ops.truth(out, found)
    if isinstance(container, DictViewVar):
        if container.kind == "keys":
            container = container.dict
        else:  # values/items: what they hold now, searched as a list is
            container = ListVar(ListBox(ops.view_items(out, container)))
    if isinstance(container, DictVar):
        out.depend(container)
        return ops.const_value(out, item) in container.box.items
    if isinstance(container, (TupleVar, ListVar)):
        for candidate in ops.items(out, container):
            if type_trackers.user_class(item) or type_trackers.user_class(candidate):
                # CPython's list_contains: identity, then ``candidate == item`` (a user __eq__).
                if ops.identical(out, candidate, item) or ops.truth(
                    out, object_operators.compare_op(vm, "==", candidate, item)
                ):
                    return True
                continue
            if isinstance(candidate, (ListVar, DictVar)) and ops.identical(out, candidate, item):
                return True  # identity first, as CPython: ``l in [l]`` for a list holding itself
            if isinstance(item, TensorVar) or isinstance(candidate, TensorVar):
                if isinstance(item, TensorVar) and isinstance(candidate, TensorVar):
                    if item.node is candidate.node:
                        return True
                    continue
                continue
            found, wanted = ops.const_value(out, candidate), ops.const_value(out, item)
            if found is wanted or found == wanted:  # identity first, as CPython (a nan)
                return True
        return False
    if isinstance(container, TensorVar):
        raise Unsupported("`in` on a tensor depends on its data")
    return bool(ops.const_value(out, item) in ops.const_value(out, container))


@handler("UNARY_NEGATIVE")
def UNARY_NEGATIVE(vm: Interpreter, inst: dis.Instruction) -> None:
    vm.push(object_operators.unary_op(vm, operator.neg, vm.pop()))


@handler("UNARY_POSITIVE", versions=(3.11,))
def UNARY_POSITIVE(vm: Interpreter, inst: dis.Instruction) -> None:
    vm.push(object_operators.unary_op(vm, operator.pos, vm.pop()))


@handler("UNARY_INVERT")
def UNARY_INVERT(vm: Interpreter, inst: dis.Instruction) -> None:
    vm.push(object_operators.unary_op(vm, operator.invert, vm.pop()))


@handler("UNARY_NOT")
def UNARY_NOT(vm: Interpreter, inst: dis.Instruction) -> None:
    value = vm.pop()
    found = object_model.truth(vm, value)
    vm.push(ConstVar(not (ops.truth(vm.out, value) if found is None else found)))
