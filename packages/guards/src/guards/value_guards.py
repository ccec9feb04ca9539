"""Guards on Python values read from the frame: TYPE_MATCH, ID_MATCH, CONSTANT_MATCH (by eager's
semantics: nan, -0.0 and True/1/1.0 told apart), LENGTH and DICT_KEYS."""

from __future__ import annotations

import math
import weakref
from enum import Enum
from typing import Any, ClassVar

import attrs
import torch

from guards.errors import UnsupportedGuardValue
from guards.guard import CodeContext, Guard, type_name
from guards.source import Source, is_literal


def _const(value: object, ctx: CodeContext, hint: str) -> str:
    return repr(value) if is_literal(value) else ctx.bind(value, hint)


@attrs.frozen
class TypeMatch(Guard):
    """``type(x) is T``."""

    kind: ClassVar[str] = "TYPE_MATCH"
    rank: ClassVar[int] = 1
    expected: type

    def text(self) -> str:
        return f"TYPE_MATCH: {self._name()} type={type_name(self.expected)}"

    def emit(self, var: str, ctx: CodeContext) -> list[str]:
        return [f"if type({var}) is not {ctx.bind(self.expected, 'type')}: return False"]

    def explain(
        self, value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> str | None:
        if type(value) is self.expected:
            return None
        return (
            f"type({self._name()}) is {type_name(self.expected)} expected, "
            f"got {type_name(type(value))}"
        )


@attrs.frozen
class IdMatch(Guard):
    """``x is obj``: identity of a function, module, class or other object.

    Reference policy: the guard holds a *weak* reference when the object supports one, so a
    cache entry never keeps a module or function alive; once the object dies the guard fails
    forever (no other object can be "the same").  Objects without weakref support (builtin
    functions, some extension objects) are held strongly, so their id can never be reused.
    """

    kind: ClassVar[str] = "ID_MATCH"
    rank: ClassVar[int] = 0
    obj_id: int
    obj_type: type
    ref: Any = attrs.field(eq=False, repr=False)  # weakref.ref or a strong reference
    weak: bool = attrs.field(eq=False)
    label: str = attrs.field(eq=False, default="")  # qualname of a function/class/module

    @classmethod
    def of(cls, source: Source, value: object) -> IdMatch:
        """Build the guard for ``value``; None is rejected (use CONSTANT_MATCH)."""
        if value is None:
            raise UnsupportedGuardValue("ID_MATCH on None: use CONSTANT_MATCH")
        try:
            ref: object = weakref.ref(value)
            weak = True
        except TypeError:
            ref, weak = value, False
        label = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
        return cls(
            source, id(value), type(value), ref, weak, label if isinstance(label, str) else ""
        )

    def target(self) -> object:
        """The guarded object, or None if it has been collected."""
        return self.ref() if self.weak else self.ref

    def text(self) -> str:
        named = f" name={self.label}" if self.label else ""
        return f"ID_MATCH: {self._name()} id={self.obj_id} type={type_name(self.obj_type)}{named}"

    def emit(self, var: str, ctx: CodeContext) -> list[str]:
        if self.weak:
            # A dead weakref returns None; the second test keeps None from matching it.
            ref = ctx.bind(self.ref, "ref")
            return [f"if {var} is not {ref}() or {var} is None: return False"]
        return [f"if {var} is not {ctx.bind(self.ref, 'obj')}: return False"]

    def explain(
        self, value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> str | None:
        target = self.target()
        if value is target and value is not None:
            return None
        if target is None:
            return f"{self._name()}: the guarded {type_name(self.obj_type)} object no longer exists"
        return (
            f"{self._name()} is the {type_name(self.obj_type)} with id {self.obj_id} expected, "
            f"got a {type_name(type(value))} with id {id(value)}"
        )


def _constant_key(value: object) -> object:
    """A hashable key that tells apart what CONSTANT_MATCH tells apart (type, nan, -0.0)."""
    if type(value) in (float, complex):
        return (type(value), repr(value))
    if type(value) is tuple:
        return (tuple, tuple(_constant_key(v) for v in value))
    if isinstance(value, Enum | torch.dtype):
        return (type(value), id(value))
    return (type(value), value)


def _check_constant(value: object) -> None:
    if value is None or type(value) in (bool, int, float, complex, str, bytes, torch.device):
        return
    if isinstance(value, Enum | torch.dtype):
        return
    if type(value) is tuple:
        for v in value:
            _check_constant(v)
        return
    raise UnsupportedGuardValue(
        f"CONSTANT_MATCH does not support {type(value).__name__} values; "
        "use TYPE_MATCH/LENGTH/ID_MATCH on it instead"
    )


def constant_equal(actual: object, expected: object) -> bool:
    """CONSTANT_MATCH's comparison: the same type and the same value (nan == nan, 0.0 != -0.0)."""
    if expected is None or type(expected) is bool or isinstance(expected, Enum | torch.dtype):
        return actual is expected
    if type(actual) is not type(expected):
        return False
    if type(expected) is float:
        assert isinstance(actual, float)
        if math.isnan(expected):
            return math.isnan(actual)
        return actual == expected and math.copysign(1.0, actual) == math.copysign(1.0, expected)
    if type(expected) is complex:
        assert isinstance(actual, complex)
        return constant_equal(actual.real, expected.real) and constant_equal(
            actual.imag, expected.imag
        )
    if type(expected) is tuple:
        assert isinstance(actual, tuple)
        return len(actual) == len(expected) and all(
            constant_equal(a, e) for a, e in zip(actual, expected, strict=True)
        )
    return actual == expected


def _constant_conditions(expr: str, value: object, ctx: CodeContext) -> list[str]:
    """Python conditions that hold exactly when ``constant_equal(<expr>, value)``."""
    if value is None:
        return [f"{expr} is None"]
    if type(value) is bool:
        return [f"{expr} is {value!r}"]
    if isinstance(value, Enum | torch.dtype):
        return [f"{expr} is {ctx.bind(value, 'const')}"]
    conds = [f"type({expr}) is {_const(type(value), ctx, 'type')}"]
    if type(value) is tuple:
        conds.append(f"len({expr}) == {len(value)}")
        for i, item in enumerate(value):
            conds.extend(_constant_conditions(f"{expr}[{i}]", item, ctx))
        return conds
    if type(value) is float:
        if math.isnan(value):
            return [*conds, f"{expr} != {expr}"]
        conds.append(f"{expr} == {_const(value, ctx, 'const')}")
        if value == 0.0:
            sign = math.copysign(1.0, value)
            conds.append(f"{ctx.bind(math.copysign, 'copysign')}(1.0, {expr}) == {sign!r}")
        return conds
    if type(value) is complex:
        # Part by part, as floats: nan and -0.0 parts are told apart the same way.
        return [
            *conds,
            *_constant_conditions(f"{expr}.real", value.real, ctx),
            *_constant_conditions(f"{expr}.imag", value.imag, ctx),
        ]
    return [*conds, f"{expr} == {_const(value, ctx, 'const')}"]


@attrs.frozen
class ConstantMatch(Guard):
    """Type and value of a constant: None, bool, int, float and complex (nan, -0.0 included),
    str, bytes, enum members, torch.dtype, torch.device, and tuples of these."""

    kind: ClassVar[str] = "CONSTANT_MATCH"
    rank: ClassVar[int] = 2
    value: object = attrs.field(eq=False)
    key: object = attrs.field(repr=False)

    @classmethod
    def of(cls, source: Source, value: object) -> ConstantMatch:
        """Build the guard; raises UnsupportedGuardValue for other types."""
        _check_constant(value)
        return cls(source, value, _constant_key(value))

    def text(self) -> str:
        return (
            f"CONSTANT_MATCH: {self._name()} == {self.value!r} type={type_name(type(self.value))}"
        )

    def emit(self, var: str, ctx: CodeContext) -> list[str]:
        conds = _constant_conditions(var, self.value, ctx)
        return [f"if not ({' and '.join(conds)}): return False"]

    def explain(
        self, value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> str | None:
        if constant_equal(value, self.value):
            return None
        got = (
            repr(value)
            if type(value) is type(self.value)
            else f"{value!r} ({type_name(type(value))})"
        )
        return f"{self._name()} == {self.value!r} expected, got {got}"


@attrs.frozen
class Length(Guard):
    """``type(x) is T and len(x) == n`` for list, tuple and dict (and their exact subclasses)."""

    kind: ClassVar[str] = "LENGTH"
    rank: ClassVar[int] = 3
    expected_type: type
    length: int

    def text(self) -> str:
        return f"LENGTH: {self._name()} type={type_name(self.expected_type)} len={self.length}"

    def emit(self, var: str, ctx: CodeContext) -> list[str]:
        tp = ctx.bind(self.expected_type, "type")
        return [f"if type({var}) is not {tp} or len({var}) != {self.length}: return False"]

    def explain(
        self, value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> str | None:
        if type(value) is not self.expected_type:
            return (
                f"type({self._name()}) is {type_name(self.expected_type)} expected, "
                f"got {type_name(type(value))}"
            )
        assert isinstance(value, list | tuple | dict)
        if len(value) != self.length:
            return f"len({self._name()}) == {self.length} expected, got {len(value)}"
        return None


@attrs.frozen
class DictKeys(Guard):
    """``type(d) is T`` and the keys, in order, equal to the recorded ones."""

    kind: ClassVar[str] = "DICT_KEYS"
    rank: ClassVar[int] = 4
    expected_type: type
    keys: tuple[object, ...]

    def text(self) -> str:
        tp = type_name(self.expected_type)
        return f"DICT_KEYS: {self._name()} type={tp} keys={list(self.keys)!r}"

    def emit(self, var: str, ctx: CodeContext) -> list[str]:
        # Keys equal by == may still differ as eager sees them (True, 1 and 1.0; 0.0 and
        # -0.0): where that can happen, each key is also compared as CONSTANT_MATCH does.
        exact = (
            [f"if not {ctx.bind(same_keys, 'same_keys')}({var}, {ctx.bind(self.keys, 'keys')}):"
             " return False"]
            if _keys_need_types(self.keys) else []
        )
        if ctx.native is not None and self.expected_type is dict:
            # The same test in C++, skipped while the dict keeps the version tag of its last
            # passing call (DictKeysCheck in csrc/dict_keys.cpp says why that is sound).
            check = ctx.bind(ctx.native.DictKeysCheck(self.keys), "dict_keys_check")
            return [f"if not {check}({var}): return False", *exact]
        tp = ctx.bind(self.expected_type, "type")
        keys = _const(self.keys, ctx, "keys")
        return [f"if type({var}) is not {tp} or tuple({var}) != {keys}: return False", *exact]

    def explain(
        self, value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> str | None:
        if type(value) is not self.expected_type:
            return (
                f"type({self._name()}) is {type_name(self.expected_type)} expected, "
                f"got {type_name(type(value))}"
            )
        assert isinstance(value, dict)
        exact = not _keys_need_types(self.keys) or same_keys(value, self.keys)
        if tuple(value) != self.keys or not exact:
            got = list(value)
            if tuple(value) == self.keys:  # equal by ==, not as constants: show the types
                return (
                    f"list({self._name()}.keys()) == {list(self.keys)!r} of types "
                    f"{[type_name(type(k)) for k in self.keys]} expected, got {got!r} of types "
                    f"{[type_name(type(k)) for k in got]}"
                )
            return f"list({self._name()}.keys()) == {list(self.keys)!r} expected, got {got!r}"
        return None


def _keys_need_types(keys: tuple[object, ...]) -> bool:
    return any(type(k) in (bool, int, float, complex, tuple) for k in keys)


def same_keys(d: dict[object, object], keys: tuple[object, ...]) -> bool:
    """The keys of ``d``, in order, are ``keys`` as CONSTANT_MATCH compares constants."""
    return len(d) == len(keys) and all(
        constant_equal(a, k) for a, k in zip(d, keys, strict=False)
    )

