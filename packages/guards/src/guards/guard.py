"""Guard records, one class per kind, each owning its check code and its words.

A guard kind knows three things about itself, kept side by side so they cannot drift:
``emit`` -- the statements of the fast check, ``explain`` -- the same check written out in
words for ``failures()``, and ``text()`` -- one line for ``CompiledGuards.text``.
"""

from __future__ import annotations

import ast
import builtins
import math
import weakref
from collections.abc import Mapping
from enum import Enum
from typing import Any, ClassVar, Protocol

import attrs
import torch

from guards.errors import GuardError, UnsupportedGuardValue
from guards.global_state import AUTOCAST_DEVICES, GlobalStateSnapshot, capture_global_state
from guards.native import dispatch_tls_check, global_state_check, tensor_check
from guards.source import Source, is_literal
from guards.tensor_spec import StrideRel, TensorSpec, plain_torch_function

__all__ = [
    "CodeContext",
    "Guard",
    "TypeMatch",
    "IdMatch",
    "ConstantMatch",
    "Length",
    "DictKeys",
    "TensorMatch",
    "DispatchTls",
    "GlobalState",
    "Shape",
    "type_name",
]


class CodeContext(Protocol):
    """What a guard needs from the code generator."""

    def bind(self, value: object, hint: str) -> str:
        """Bind ``value`` as a constant of the generated function; return its name."""
        ...

    def temp(self, hint: str) -> str:
        """A fresh local variable name."""
        ...

    @property
    def tls_exclude_checked(self) -> int | None:
        """The dispatch TLS exclude set (raw) that this check function compares exactly, if any."""
        ...

    @property
    def native(self) -> Any:
        """The C++ fast-path module (``guards.native``), or None for the pure-Python path."""
        ...

    def load(self, source: Source) -> str:
        """The local holding ``source``'s value, read now (bases first, once per check) when
        no earlier guard read it."""
        ...


def type_name(tp: type) -> str:
    """``torch.Tensor``, ``int``, ``mymod.MyClass``: a class as people write it."""
    module = tp.__module__
    if module == "builtins":
        return tp.__qualname__
    if module.startswith("torch") and getattr(torch, tp.__name__, None) is tp:
        return f"torch.{tp.__name__}"
    return f"{module}.{tp.__qualname__}"


def _const(value: object, ctx: CodeContext, hint: str) -> str:
    return repr(value) if is_literal(value) else ctx.bind(value, hint)


@attrs.frozen
class Guard:
    """Base of all guard kinds.  ``source`` is None for guards on global state or shapes."""

    kind: ClassVar[str] = ""
    #: Order among guards on sources of the same depth: cheap identity checks first.
    rank: ClassVar[int] = 0

    source: Source | None

    def merge_key(self) -> tuple[object, ...]:
        """Guards with the same key are merged into one by ``GuardSet``."""
        return (self.kind, self.source)

    def merge(self, other: Guard) -> Guard:
        """Combine with a guard of the same key; contradictory guards raise GuardError."""
        if self == other:
            return self
        raise GuardError(
            f"contradictory guards on the same value:\n  {self.text()}\n  {other.text()}"
        )

    def text(self) -> str:
        """One line in the TorchDynamo README style, ``KIND: source details``."""
        raise NotImplementedError

    def emit(self, var: str, ctx: CodeContext) -> list[str]:
        """Statements checking the value held in local ``var``; each failing path returns False."""
        raise NotImplementedError

    def explain(
        self, value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> str | None:
        """None if the guard holds for ``value``, else what differs, in words."""
        raise NotImplementedError

    def _name(self) -> str:
        return self.source.name() if self.source is not None else ""


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


def _stride_text(expr: int | StrideRel) -> str:
    return str(expr)


@attrs.frozen
class TensorMatch(Guard):
    """Class, dtype, device, requires_grad, dispatch keys, ndim, sizes, strides of a tensor.

    Dynamic dims (``sizes[i] is None``) are checked for ``size >= 2``; strides follow
    ``tensor_spec.stride_rule``.  The thread-local dispatch include/exclude sets are checked
    once per guard function by the DISPATCH_TLS guard that ``GuardSet.TENSOR_MATCH`` adds.
    """

    kind: ClassVar[str] = "TENSOR_MATCH"
    rank: ClassVar[int] = 5
    spec: TensorSpec

    def merge(self, other: Guard) -> Guard:
        if not isinstance(other, TensorMatch) or self.spec == other.spec:
            return super().merge(other)
        a, b = self.spec, other.spec
        if attrs.evolve(a, sizes=b.sizes, strides=b.strides) != b:
            return super().merge(other)
        # Same tensor seen static in one place and dynamic in another: keep the stricter.
        sizes = tuple(x if x is not None else y for x, y in zip(a.sizes, b.sizes, strict=True))
        strides = (
            None
            if a.strides is None or b.strides is None
            else tuple(
                x if isinstance(x, int) else y for x, y in zip(a.strides, b.strides, strict=True)
            )
        )
        return attrs.evolve(self, spec=attrs.evolve(a, sizes=sizes, strides=strides))

    def text(self) -> str:
        s = self.spec
        sizes = ", ".join("dyn>=2" if x is None else str(x) for x in s.sizes)
        strides = "" if s.strides is None else ", ".join(_stride_text(x) for x in s.strides)
        layout = "" if s.layout == torch.strided else f" layout={s.layout}"
        keys = ", ".join(str(s.dispatch_keys)[len("DispatchKeySet(") : -1].split(", "))
        return (
            f"TENSOR_MATCH: {self._name()} class={type_name(s.cls)} dtype={s.dtype} "
            f"device={s.device} requires_grad={s.requires_grad} size=[{sizes}] "
            f"stride=[{strides}]{layout} dispatch_keys=[{keys}]"
        )

    def emit(self, var: str, ctx: CodeContext) -> list[str]:
        if ctx.native is not None:
            check = tensor_check(ctx.native, self.spec)
            if check is not None:
                # The same properties, read from the TensorImpl in one C++ call.
                return [f"if not {ctx.bind(check, 'tensor_check')}({var}): return False"]
        return self.emit_python(var, ctx)

    def emit_python(self, var: str, ctx: CodeContext) -> list[str]:
        """The pure-Python statements of ``emit``."""
        s = self.spec
        out = [
            f"if type({var}) is not {ctx.bind(s.cls, 'tensor_type')}: return False",
            f"if {var}.dtype is not {ctx.bind(s.dtype, 'dtype')}: return False",
        ]
        if None not in s.sizes:
            out.append(f"if {var}.size() != {tuple(s.sizes)!r}: return False")
        else:
            size = ctx.temp("size")
            checks = [f"len({size}) != {s.ndim}"]
            for i, n in enumerate(s.sizes):
                checks.append(f"{size}[{i}] < 2" if n is None else f"{size}[{i}] != {n}")
            out.append(f"{size} = {var}.size()")
            out.append(f"if {' or '.join(checks)}: return False")
        if s.strides is None:
            pass  # no strides in this layout; the dispatch keys below pin the layout
        elif all(isinstance(x, int) for x in s.strides):
            out.append(f"if {var}.stride() != {tuple(s.strides)!r}: return False")
        else:
            stride = ctx.temp("stride")
            size = ctx.temp("size") if None not in s.sizes else size
            if None not in s.sizes:
                out.append(f"{size} = {var}.size()")
            out.append(f"{stride} = {var}.stride()")
            checks = []
            for i, x in enumerate(s.strides or ()):
                if isinstance(x, int):
                    checks.append(f"{stride}[{i}] != {x}")
                else:
                    checks.append(f"{stride}[{i}] != {stride}[{x.dim}] * {size}[{x.dim}]")
            out.append(f"if {' or '.join(checks)}: return False")
        out.append(f"if {var}.requires_grad is not {s.requires_grad!r}: return False")
        if s.device_index >= 0:
            # CPU and meta tensors (index -1) are told apart by their backend dispatch key,
            # checked next; only accelerator indices need their own read.
            out.append(f"if {var}.get_device() != {s.device_index}: return False")
        keys = ctx.bind(torch._C._dispatch_keys, "dispatch_keys")
        out.append(f"if {keys}({var}).raw_repr() != {s.dispatch_keys_raw}: return False")
        return out

    def reads_through_override(self) -> bool:
        """Whether Python reads of this tensor would run its class's ``__torch_function__``
        (the check then runs under ``DisableTorchFunctionSubclass``, see check_fn)."""
        return not plain_torch_function(self.spec.cls)

    def _label(self) -> str:
        return f"tensor '{self.source.describe()}'" if self.source is not None else "tensor"

    def explain(
        self, value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> str | None:
        s = self.spec
        label = self._label()
        if type(value) is not s.cls:
            want_cls, got_cls = type_name(s.cls), type_name(type(value))
            return f"{label} class mismatch: expected {want_cls}, actual {got_cls}"
        assert isinstance(value, torch.Tensor)
        if value.layout != s.layout:
            return f"{label} layout mismatch: expected {s.layout}, actual {value.layout}"
        problems: list[str] = []
        if value.dtype is not s.dtype:
            problems.append(f"{label} dtype mismatch: expected {s.dtype}, actual {value.dtype}")
        if value.get_device() != s.device_index or value.device.type != s.device.type:
            problems.append(f"{label} device mismatch: expected {s.device}, actual {value.device}")
        if value.requires_grad is not s.requires_grad:
            problems.append(
                f"{label} requires_grad mismatch: expected {s.requires_grad}, "
                f"actual {value.requires_grad}"
            )
        keys = torch._C._dispatch_keys(value)
        if keys.raw_repr() != s.dispatch_keys_raw:
            problems.append(
                f"{label} dispatch keys mismatch: expected {s.dispatch_keys}, actual {keys}"
            )
        size = tuple(value.size())
        stride = tuple(value.stride()) if s.strides is not None else ()
        if len(size) != s.ndim:
            problems.append(f"{label} rank mismatch: expected {s.ndim}, actual {len(size)}")
            return "; ".join(problems)
        for i, n in enumerate(s.sizes):
            if n is None and size[i] < 2:
                problems.append(
                    f"{label} size mismatch at index {i}: expected a dynamic size >= 2, "
                    f"actual {size[i]}"
                )
            elif n is not None and size[i] != n:
                problems.append(
                    f"{label} size mismatch at index {i}: expected {n}, actual {size[i]}"
                )
        for i, x in enumerate(s.strides or ()):
            want = x if isinstance(x, int) else stride[x.dim] * size[x.dim]
            if stride[i] != want:
                how = "" if isinstance(x, int) else f" (= {x})"
                problems.append(
                    f"{label} stride mismatch at index {i}: "
                    f"expected {want}{how}, actual {stride[i]}"
                )
        return "; ".join(problems) or None


@attrs.frozen
class DispatchTls(Guard):
    """The thread-local dispatch include/exclude sets at capture (one per guard set).

    Together with each tensor's own dispatch keys this pins the keys a kernel call would
    dispatch on.  It is stricter than comparing ``(keys | include) - exclude`` per tensor:
    a TLS change that would not alter any tensor's effective keys still fails (a recompile,
    never a wrong result), in exchange for two calls per check instead of two per tensor.
    """

    kind: ClassVar[str] = "DISPATCH_TLS"
    rank: ClassVar[int] = 6
    include_raw: int
    exclude_raw: int
    include: Any = attrs.field(eq=False)
    exclude: Any = attrs.field(eq=False)

    @classmethod
    def capture(cls) -> DispatchTls:
        """Read the calling thread's dispatch TLS now."""
        inc = torch._C._dispatch_tls_local_include_set()
        exc = torch._C._dispatch_tls_local_exclude_set()
        return cls(None, inc.raw_repr(), exc.raw_repr(), inc, exc)

    def text(self) -> str:
        return f"DISPATCH_TLS: include={self.include} exclude={self.exclude}"

    def emit(self, var: str, ctx: CodeContext) -> list[str]:
        if ctx.native is not None:
            check = dispatch_tls_check(ctx.native, self.include_raw, self.exclude_raw)
            return [f"if not {ctx.bind(check, 'tls_check')}(): return False"]
        inc = ctx.bind(torch._C._dispatch_tls_local_include_set, "tls_include")
        exc = ctx.bind(torch._C._dispatch_tls_local_exclude_set, "tls_exclude")
        return [
            f"if {inc}().raw_repr() != {self.include_raw}: return False",
            f"if {exc}().raw_repr() != {self.exclude_raw}: return False",
        ]

    def explain(
        self, value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> str | None:
        inc = torch._C._dispatch_tls_local_include_set()
        exc = torch._C._dispatch_tls_local_exclude_set()
        problems = []
        if inc.raw_repr() != self.include_raw:
            problems.append(f"dispatch TLS include set: expected {self.include}, actual {inc}")
        if exc.raw_repr() != self.exclude_raw:
            problems.append(f"dispatch TLS exclude set: expected {self.exclude}, actual {exc}")
        return "; ".join(problems) or None


@attrs.frozen
class GlobalState(Guard):
    """Grad mode, inference mode, default dtype, deterministic algorithms, autocast and the
    number of active torch-function / torch-dispatch modes, as captured when the guard was
    added (see ``global_state``)."""

    kind: ClassVar[str] = "GLOBAL_STATE"
    rank: ClassVar[int] = 7
    snapshot: GlobalStateSnapshot

    def text(self) -> str:
        parts = " ".join(f"{name}={value}" for name, value in self.snapshot.fields())
        return f"GLOBAL_STATE: {parts}"

    def emit(self, var: str, ctx: CodeContext) -> list[str]:
        s = self.snapshot
        if ctx.native is not None:
            # Grad and inference mode, default dtype, deterministic flags and the two mode
            # stack lengths in one C++ call; the autocast reads stay in Python.
            check = ctx.bind(global_state_check(ctx.native, s), "global_state_check")
            return [
                f"if not {check}(): return False",
                *self._emit_any_autocast(ctx),
                *self._emit_autocast_state(ctx),
            ]
        return [
            f"if {ctx.bind(torch.is_grad_enabled, 'is_grad_enabled')}() is not {s.grad_enabled!r}:"
            " return False",
            *self._emit_any_autocast(ctx),
            f"if {ctx.bind(torch.get_default_dtype, 'get_default_dtype')}() is not "
            f"{ctx.bind(s.default_dtype, 'dtype')}: return False",
            # The C reads behind torch.are_deterministic_algorithms_enabled and
            # torch.is_deterministic_algorithms_warn_only_enabled (those are Python wrappers
            # that only return these): the same flag, without a Python frame per check.
            f"if {ctx.bind(torch._C._get_deterministic_algorithms, 'deterministic')}() is not "
            f"{s.deterministic!r}: return False",
            f"if {ctx.bind(torch.is_inference_mode_enabled, 'inference_mode')}() is not "
            f"{s.inference_mode!r}: return False",
            f"if {ctx.bind(torch._C._len_torch_function_stack, 'function_modes')}() != "
            f"{s.torch_function_modes}: return False",
            f"if {ctx.bind(torch._C._len_torch_dispatch_stack, 'dispatch_modes')}() != "
            f"{s.torch_dispatch_modes}: return False",
            *self._emit_warn_only(ctx),
            *self._emit_autocast_state(ctx),
        ]

    def _emit_any_autocast(self, ctx: CodeContext) -> list[str]:
        s = self.snapshot
        if ctx.tls_exclude_checked == s.tls_exclude_raw:
            # Skipped when DISPATCH_TLS compares the exclude set read with this snapshot: the
            # autocast-enabled flags are bits of that set (see GlobalStateSnapshot), so equal
            # sets mean equal flags (saves one ~80 ns call).
            return []
        return [
            f"if {ctx.bind(torch._C._is_any_autocast_enabled, 'any_autocast')}() is not "
            f"{s.any_autocast!r}: return False"
        ]

    def _emit_warn_only(self, ctx: CodeContext) -> list[str]:
        s = self.snapshot
        if not s.deterministic:
            return []
        warn = ctx.bind(torch._C._get_deterministic_algorithms_warn_only, "det_warn_only")
        return [f"if {warn}() is not {s.deterministic_warn_only!r}: return False"]

    def _emit_autocast_state(self, ctx: CodeContext) -> list[str]:
        s = self.snapshot
        if not s.any_autocast:
            # Only when autocast was on at capture: otherwise "none enabled" suffices and the
            # dtypes / cache flag cannot change what runs.
            return []
        state = ctx.bind(_autocast_now, "autocast_state")
        expected = ctx.bind((s.autocast, s.autocast_cache), "autocast")
        return [f"if {state}() != {expected}: return False"]

    def explain(
        self, value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> str | None:
        now = capture_global_state()
        relevant = {
            "grad_enabled",
            "inference_mode",
            "default_dtype",
            "deterministic_algorithms",
            "any_autocast",
            "torch_function_modes",
            "torch_dispatch_modes",
        }
        if self.snapshot.deterministic:
            relevant.add("deterministic_warn_only")
        if self.snapshot.any_autocast:
            relevant.update(n for n, _ in self.snapshot.fields() if n.startswith("autocast"))
        problems = [
            f"global state {name}: expected {want}, actual {got}"
            for (name, want), (_, got) in zip(self.snapshot.fields(), now.fields(), strict=True)
            if name in relevant and want != got
        ]
        return "; ".join(problems) or None


def _autocast_now() -> tuple[tuple[tuple[str, bool, Any], ...], bool]:
    return (
        tuple(
            (d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in AUTOCAST_DEVICES
        ),
        torch.is_autocast_cache_enabled(),
    )


Operands = tuple[tuple[str, Source], ...]


@attrs.frozen
class Shape(Guard):
    """A Python boolean expression that must hold: a relation between sizes (SHAPE) or another
    condition (PREDICATE).

    The expression names its *operands*: each a Source, read by the check as it reads every
    source (once, bases first, constants with no literal bound), e.g. ``a is b`` with
    ``a=L['d'][Color.A]``, ``b=L['d'][Color.B]``. Nothing about a source travels as text, so
    any attribute name or dict key a Source can hold works. The expression may also name
    builtins, and ``L``/``G`` (the frame's locals and globals) for conditions on no source.
    """

    kind: ClassVar[str] = "SHAPE"
    rank: ClassVar[int] = 8
    predicate: str
    description: str = attrs.field(eq=False)
    code: Any = attrs.field(eq=False, repr=False)
    # what the log calls it: SHAPE for relations between sizes, PREDICATE for other conditions
    # (no global module hooks, an attribute still missing, ...)
    label: str = attrs.field(default="SHAPE", eq=False)
    operands: Operands = ()

    @classmethod
    def of(
        cls,
        predicate: str,
        description: str,
        label: str = "SHAPE",
        operands: Mapping[str, Source] | None = None,
    ) -> Shape:
        """Parse ``predicate`` now, so a bad expression fails when it is added."""
        named = dict(operands or {})
        try:
            tree = ast.parse(predicate, mode="eval")
        except SyntaxError as exc:
            raise GuardError(f"SHAPE predicate is not a Python expression: {predicate!r}") from exc
        reserved = sorted(
            n for n in named if not n.isidentifier() or n in {"L", "G"} or hasattr(builtins, n)
        )
        if reserved:
            raise GuardError(f"SHAPE operand names must be fresh identifiers, not {reserved}")
        # The predicate is pasted into the generated function, whose locals and bound
        # constants it must not see: only operands, L, G and builtins may be named.
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        stray = sorted(names - {"L", "G"} - named.keys() - set(dir(builtins)))
        if stray:
            raise GuardError(
                f"SHAPE predicate may name only its operands, L, G and builtins, not {stray}"
            )
        code = compile(tree, "<shape guard>", "eval")
        return cls(None, predicate, description, code, label, tuple(sorted(named.items())))

    def merge_key(self) -> tuple[object, ...]:
        return (self.kind, self.predicate, self.operands)

    def shown(self) -> str:
        """The predicate with each operand shown as its source's expression (for people)."""
        if not self.operands:
            return self.predicate
        return _substitute(self.predicate, {k: s.name() for k, s in self.operands})

    def text(self) -> str:
        return f"{self.label}: {self.shown()}  # {self.description}"

    def emit(self, var: str, ctx: CodeContext) -> list[str]:
        test = self.predicate
        if self.operands:
            test = _substitute(test, {k: ctx.load(s) for k, s in self.operands})
        return [f"if not ({test}): return False"]

    def explain(
        self, value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> str | None:
        scope: dict[str, object] = {"L": f_locals, "G": f_globals}
        scope.update((k, s.resolve(f_locals, f_globals)) for k, s in self.operands)
        if eval(self.code, scope):
            return None
        return f"{self.label.lower()} guard failed: {self.description} ({self.shown()})"


class _Rename(ast.NodeTransformer):
    """Replaces operand names (free names of the predicate) by other names."""

    def __init__(self, names: Mapping[str, str]) -> None:
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.expr:
        new = self.names.get(node.id)
        return node if new is None else ast.copy_location(ast.Name(new, ast.Load()), node)


def _substitute(predicate: str, names: Mapping[str, str]) -> str:
    """``predicate`` with each name in ``names`` replaced by its text (a local of the check,
    or a source's expression for the log), as a syntax tree: never inside a string."""
    return ast.unparse(_Rename(names).visit(ast.parse(predicate, mode="eval")))
