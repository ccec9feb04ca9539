"""Building, indexing and unpacking tuples, lists, dicts, slices and strings."""

from __future__ import annotations

import dis
import operator
import types
from typing import Any

from symbolic_vm import attributes, object_model, object_operators, sets
from symbolic_vm import operations as ops
from symbolic_vm.builtin_objects import has_attribute, python_type
from symbolic_vm.builtins_ import call_builtin
from symbolic_vm.class_dicts import class_lookup
from symbolic_vm.constant_values import is_constant_value
from symbolic_vm.errors import Unsupported
from symbolic_vm.handlers.exceptions import stopiteration_error
from symbolic_vm.interpreter import Interpreter, handler
from symbolic_vm.values import (
    ConstVar,
    DictBox,
    DictVar,
    ListBox,
    ListVar,
    ObjectVar,
    SetBox,
    SetVar,
    SliceVar,
    SymVar,
    TensorVar,
    TupleVar,
    Var,
)


def _arg(inst: dis.Instruction) -> int:
    assert inst.arg is not None
    return inst.arg


@handler("BUILD_TUPLE")
def BUILD_TUPLE(vm: Interpreter, inst: dis.Instruction) -> None:
    vm.push(TupleVar(tuple(vm.popn(_arg(inst)))))


@handler("BUILD_LIST")
def BUILD_LIST(vm: Interpreter, inst: dis.Instruction) -> None:
    vm.push(ListVar(ListBox(vm.popn(_arg(inst)))))


@handler("BUILD_SET")
def BUILD_SET(vm: Interpreter, inst: dis.Instruction) -> None:
    items: set[Any] = set()
    for element in sets.set_elements(vm, vm.popn(_arg(inst))):
        items.add(element)  # in order, as CPython builds it
    vm.push(SetVar(SetBox(items)))


@handler("BUILD_MAP")
def BUILD_MAP(vm: Interpreter, inst: dis.Instruction) -> None:
    flat = vm.popn(2 * _arg(inst))
    items = {ops.const_value(vm.out, flat[i]): flat[i + 1] for i in range(0, len(flat), 2)}
    vm.push(DictVar(DictBox(items)))


@handler("BUILD_CONST_KEY_MAP")
def BUILD_CONST_KEY_MAP(vm: Interpreter, inst: dis.Instruction) -> None:
    keys = ops.const_value(vm.out, vm.pop())
    values = vm.popn(_arg(inst))
    vm.push(DictVar(DictBox(dict(zip(keys, values, strict=True)))))


@handler("BUILD_SLICE")
def BUILD_SLICE(vm: Interpreter, inst: dis.Instruction) -> None:
    vm.push(_slice(vm, vm.popn(_arg(inst))))


def _slice(vm: Interpreter, parts: list[Var]) -> Var:
    """The slice ``start:stop[:step]`` as BUILD_SLICE makes it (3.12+'s BINARY_SLICE makes the
    same one, so that ``obj[a:b]`` reads as on 3.11)."""
    if any(isinstance(p, (SymVar, TensorVar)) for p in parts):  # x[n:], x[t:]
        start, stop, *step = parts
        return SliceVar(start, stop, step[0] if step else ConstVar(None))
    return ConstVar(slice(*[ops.const_value(vm.out, v) for v in parts]))


@handler("BUILD_STRING")
def BUILD_STRING(vm: Interpreter, inst: dis.Instruction) -> None:
    parts = [ops.const_value(vm.out, v) for v in vm.popn(_arg(inst))]
    vm.push(ConstVar("".join(parts)))


_CONVERSIONS: dict[int, Any] = {0: None, 1: str, 2: repr, 3: ascii}


@handler("FORMAT_VALUE", versions=(3.11, 3.12))
def FORMAT_VALUE(vm: Interpreter, inst: dis.Instruction) -> None:
    flags = _arg(inst)
    spec = ops.const_value(vm.out, vm.pop()) if flags & 0x04 else ""
    obj = vm.pop()
    text = _user_text(vm, obj, flags & 0x03, spec)
    if text is not None:
        vm.push(text)
        return
    value = _formattable(vm, obj)
    conversion = _CONVERSIONS[flags & 0x03]
    if conversion is not None:
        value = conversion(value)
    vm.push(ConstVar(format(value, spec)))


@handler("CONVERT_VALUE", versions=(3.13,))
def CONVERT_VALUE(vm: Interpreter, inst: dis.Instruction) -> None:
    obj = vm.pop()
    text = _user_text(vm, obj, _arg(inst), None)
    if text is not None:
        vm.push(text)
        return
    conversion = _CONVERSIONS[_arg(inst)]
    assert conversion is not None
    vm.push(ConstVar(conversion(_formattable(vm, obj))))


@handler("FORMAT_SIMPLE", versions=(3.13,))
def FORMAT_SIMPLE(vm: Interpreter, inst: dis.Instruction) -> None:
    obj = vm.pop()
    text = _user_text(vm, obj, 0, "")
    vm.push(text if text is not None else ConstVar(format(_formattable(vm, obj), "")))


@handler("FORMAT_WITH_SPEC", versions=(3.13,))
def FORMAT_WITH_SPEC(vm: Interpreter, inst: dis.Instruction) -> None:
    spec = ops.const_value(vm.out, vm.pop())
    obj = vm.pop()
    text = _user_text(vm, obj, 0, spec)
    vm.push(text if text is not None else ConstVar(format(_formattable(vm, obj), spec)))


def _user_text(vm: Interpreter, obj: Var, conversion: int, spec: str | None) -> Var | None:
    """An f-string part of a user object (its ``__format__``/``__str__``/``__repr__`` traced):
    conversion 0 formats with ``spec``, !s/!r convert (then ``spec`` formats the text)."""
    if conversion not in (0, 1, 2):
        return None
    kind = ("format", "str", "repr")[conversion]
    text = object_model.text_of(vm, obj, kind, ConstVar(spec or "") if kind == "format" else None)
    if text is None or kind == "format" or spec is None:
        return text
    return ConstVar(format(ops.const_value(vm.out, text), spec))


def _formattable(vm: Interpreter, value: Var) -> object:
    """The Python value an f-string formats; a symbolic int by its (guarded) value, as str()."""
    if isinstance(value, ObjectVar) and _builtin_text(value.value):
        return value.value
    if not (ops.is_plain_value(value) or isinstance(value, SymVar)):
        raise Unsupported(f"f-string formatting of {ops.describe(value)}")
    return ops.const_value(vm.out, value)


def _builtin_text(value: object) -> bool:
    """An exception object (the VM's exceptions are real objects made from constants) whose
    class formats it in C (``f"{err}"``): its text depends on its args only; a frozenset of
    constants (the real object: its repr's order is its own)."""
    if type(value) is frozenset:
        return all(is_constant_value(v) for v in value)
    if not isinstance(value, BaseException):
        return False
    cls = type(value)
    return not any(
        isinstance(class_lookup(cls, name), types.FunctionType)
        for name in ("__str__", "__repr__", "__format__")
    )


@handler("LIST_APPEND")
def LIST_APPEND(vm: Interpreter, inst: dis.Instruction) -> None:
    value = vm.pop()
    target = vm.peek(_arg(inst))
    assert isinstance(target, ListVar)
    target.box.items.append(value)
    # a display's list is new, except one resumed after a break inside it (a frame input)
    ops.note_mutation(vm.out, target)


@handler("SET_ADD")
def SET_ADD(vm: Interpreter, inst: dis.Instruction) -> None:
    (value,) = sets.set_elements(vm, [vm.pop()])
    target = vm.peek(_arg(inst))
    assert isinstance(target, SetVar)
    ops.note_set_mutation(vm.out, target)
    target.box.items.add(value)


@handler("SET_UPDATE")
def SET_UPDATE(vm: Interpreter, inst: dis.Instruction) -> None:
    values = sets.set_operand(vm, vm.pop())
    target = vm.peek(_arg(inst))
    assert isinstance(target, SetVar)
    ops.note_set_mutation(vm.out, target)
    target.box.items.update(values)


@handler("LIST_EXTEND")
def LIST_EXTEND(vm: Interpreter, inst: dis.Instruction) -> None:
    values = ops.iterate(vm.out, vm.pop())
    target = vm.peek(_arg(inst))
    assert isinstance(target, ListVar)
    target.box.items.extend(values)
    ops.note_mutation(vm.out, target)


@handler("MAP_ADD")
def MAP_ADD(vm: Interpreter, inst: dis.Instruction) -> None:
    value = vm.pop()
    key = ops.const_value(vm.out, vm.pop())
    target = vm.peek(_arg(inst))
    assert isinstance(target, DictVar)
    target.box.items[key] = value
    ops.note_mutation(vm.out, target)


@handler("DICT_UPDATE", "DICT_MERGE")
def DICT_UPDATE(vm: Interpreter, inst: dis.Instruction) -> None:
    other = vm.pop()
    target = vm.peek(_arg(inst))
    assert isinstance(target, DictVar)
    if not isinstance(other, DictVar):
        # ``{**m}`` of a mapping that is no dict (cls.__dict__, a user mapping): its keys()
        # and items, read as CPython's merge reads them (a non-mapping raises TypeError there).
        items = object_model.mapping_items(vm, other)
        if items is None:
            raise Unsupported(f"dict update from {ops.describe(other)}")
        target.box.items.update(items)
        ops.note_mutation(vm.out, target)
        return
    vm.out.depend(other)
    target.box.items.update(other.box.items)
    ops.note_mutation(vm.out, target)


@handler("LIST_TO_TUPLE", versions=(3.11,))
def LIST_TO_TUPLE(vm: Interpreter, inst: dis.Instruction) -> None:
    value = vm.pop()
    assert isinstance(value, ListVar)
    vm.push(TupleVar(tuple(value.box.items)))


@handler("CALL_INTRINSIC_1", versions=(3.12, 3.13))
def CALL_INTRINSIC_1(vm: Interpreter, inst: dis.Instruction) -> None:
    kind = inst.argrepr
    if kind == "INTRINSIC_LIST_TO_TUPLE":
        LIST_TO_TUPLE(vm, inst)
    elif kind == "INTRINSIC_UNARY_POSITIVE":
        vm.push(object_operators.unary_op(vm, operator.pos, vm.pop()))
    elif kind == "INTRINSIC_STOPITERATION_ERROR":
        vm.push(stopiteration_error(vm, vm.pop()))
    else:
        raise Unsupported(f"CALL_INTRINSIC_1 {kind}")


@handler("BINARY_SUBSCR")
def BINARY_SUBSCR(vm: Interpreter, inst: dis.Instruction) -> None:
    key = vm.pop()
    obj = vm.pop()
    vm.push(object_model.getitem(vm, obj, key))


@handler("BINARY_SLICE", versions=(3.12, 3.13))
def BINARY_SLICE(vm: Interpreter, inst: dis.Instruction) -> None:
    # as BUILD_SLICE then BINARY_SUBSCR: a user class's __getitem__ runs (it was refused)
    end = vm.pop()
    start = vm.pop()
    obj = vm.pop()
    vm.push(object_model.getitem(vm, obj, _slice(vm, [start, end])))


@handler("STORE_SUBSCR")
def STORE_SUBSCR(vm: Interpreter, inst: dis.Instruction) -> None:
    key = vm.pop()
    obj = vm.pop()
    value = vm.pop()
    object_model.setitem(vm, obj, key, value)


@handler("STORE_SLICE", versions=(3.12, 3.13))
def STORE_SLICE(vm: Interpreter, inst: dis.Instruction) -> None:
    # as BUILD_SLICE then STORE_SUBSCR (3.11's form): a user class's __setitem__ runs
    end = vm.pop()
    start = vm.pop()
    obj = vm.pop()
    value = vm.pop()
    object_model.setitem(vm, obj, _slice(vm, [start, end]), value)


@handler("DELETE_SUBSCR")
def DELETE_SUBSCR(vm: Interpreter, inst: dis.Instruction) -> None:
    key_var = vm.pop()
    obj = vm.pop()
    if object_model.delitem(vm, obj, key_var):
        return
    key = ops.const_value(vm.out, key_var)
    if isinstance(obj, (ListVar, DictVar)):
        del obj.box.items[key]
        ops.note_mutation(vm.out, obj)
        return
    raise Unsupported(f"del on {ops.describe(obj)}")


@handler("UNPACK_SEQUENCE")
def UNPACK_SEQUENCE(vm: Interpreter, inst: dis.Instruction) -> None:
    values = _unpacked(vm, vm.pop())
    if len(values) != _arg(inst):
        raise Unsupported(f"ValueError: expected {_arg(inst)} values to unpack, got {len(values)}")
    for value in reversed(values):
        vm.push(value)


@handler("UNPACK_EX")
def UNPACK_EX(vm: Interpreter, inst: dis.Instruction) -> None:
    before = _arg(inst) & 0xFF
    after = _arg(inst) >> 8
    values = _unpacked(vm, vm.pop())
    if len(values) < before + after:
        raise Unsupported("ValueError: not enough values to unpack")
    middle = ListVar(ListBox(values[before : len(values) - after]))
    parts: list[Var] = [*values[:before], middle, *values[len(values) - after :]]
    for value in reversed(parts):
        vm.push(value)


def _unpacked(vm: Interpreter, value: Var) -> list[Var]:
    """The items ``a, b = value`` takes: a user iterable through its ``__iter__``/``__next__``."""
    found = object_model.iterate(vm, value)
    return ops.iterate(vm.out, value if found is None else found)


@handler("GET_LEN")
def GET_LEN(vm: Interpreter, inst: dis.Instruction) -> None:
    result = call_builtin(vm, ObjectVar(len), [vm.peek()], {})
    assert result is not None
    vm.push(result)


@handler("MATCH_SEQUENCE")
def MATCH_SEQUENCE(vm: Interpreter, inst: dis.Instruction) -> None:
    subject = vm.peek()
    is_sequence = isinstance(subject, (TupleVar, ListVar)) or (
        isinstance(subject, ConstVar) and isinstance(subject.value, (tuple, range))
    )
    vm.push(ConstVar(is_sequence))


@handler("MATCH_MAPPING")
def MATCH_MAPPING(vm: Interpreter, inst: dis.Instruction) -> None:
    vm.push(ConstVar(isinstance(vm.peek(), DictVar)))


@handler("MATCH_KEYS")
def MATCH_KEYS(vm: Interpreter, inst: dis.Instruction) -> None:
    keys = ops.const_value(vm.out, vm.peek())
    subject = vm.peek(2)
    assert isinstance(subject, DictVar)
    vm.out.depend(subject)
    if all(k in subject.box.items for k in keys):
        vm.push(TupleVar(tuple(subject.box.items[k] for k in keys)))
    else:
        vm.push(ConstVar(None))


# Classes whose single positional sub-pattern matches the subject itself (``case int(n):``).
_MATCH_SELF = (bool, bytearray, bytes, dict, float, frozenset, int, list, set, str, tuple)


@handler("MATCH_CLASS")
def MATCH_CLASS(vm: Interpreter, inst: dis.Instruction) -> None:
    """``case Cls(p0, p1, k=p2)``: a tuple of the subject's attributes, or None if no match.

    Pops the keyword names, the class and the subject; the positional names come from the
    class's ``__match_args__`` (or the subject itself for the builtin types of _MATCH_SELF).
    """
    out = vm.out
    keywords = tuple(ops.const_value(out, vm.pop()))
    cls = ops.const_value(out, vm.pop())
    subject = vm.pop()
    if not isinstance(cls, type):
        raise Unsupported("TypeError: called match pattern must be a class")
    if not issubclass(python_type(vm, subject), cls):
        vm.push(ConstVar(None))
        return
    count = _arg(inst)
    match_args = getattr(cls, "__match_args__", None)
    if count and match_args is None:
        if count == 1 and cls in _MATCH_SELF:
            vm.push(TupleVar((subject,)))
            return
        raise Unsupported(f"TypeError: {cls.__name__}() accepts 0 positional sub-patterns")
    if count and (not isinstance(match_args, tuple) or count > len(match_args)):
        raise Unsupported(f"TypeError: {cls.__name__}() positional patterns vs __match_args__")
    names = (*(match_args[:count] if match_args else ()), *keywords)
    if len(set(names)) != len(names):
        raise Unsupported(f"TypeError: {cls.__name__}() got two sub-patterns for one attribute")
    values: list[Var] = []
    for name in names:
        if not has_attribute(vm, subject, name):
            vm.push(ConstVar(None))
            return
        values.append(attributes.getattr_var(vm, subject, name))
    vm.push(TupleVar(tuple(values)))
