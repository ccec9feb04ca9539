"""What a set operation reads from tracked values: the set-display opcodes (BUILD_SET,
SET_ADD, SET_UPDATE), ``set()``/``frozenset()`` and the set methods all read their operands
here, as CPython reads them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from symbolic_vm import operations as ops
from symbolic_vm.errors import Unsupported
from symbolic_vm.values import ObjectVar, SetVar, Var, builtin_value

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter

__all__ = ["set_elements", "set_operand"]


def set_elements(vm: Interpreter, values: list[Var]) -> list[Any]:
    """The Python values of would-be set elements: hashable constants only."""
    elements = [ops.const_value(vm.out, v) for v in values]
    for element in elements:
        try:
            hash(element)
        except TypeError as exc:
            raise Unsupported(f"TypeError: unhashable set element: {exc}") from exc
    return elements


def set_operand(vm: Interpreter, var: Var) -> Any:
    """What a set operation reads from ``var``, as Python would read it: the set object itself
    for a set or frozenset (CPython copies a set's table slot by slot, so a list of its items
    could land in other slots and iterate in another order), else the iterable's elements."""
    var = builtin_value(var)  # a set subclass's instance made here: the set it is
    if isinstance(var, SetVar):
        vm.out.depend(var)
        return var.box.items
    if isinstance(var, ObjectVar) and isinstance(var.value, (set, frozenset)):
        vm.out.depend(var)
        return var.value
    return set_elements(vm, ops.iterate(vm.out, var))
