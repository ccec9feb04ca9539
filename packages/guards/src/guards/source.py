"""Sources: where a guarded value lives, as a Python expression over ``L`` and ``G``.

``L`` is the frame's ``f_locals`` dict at entry (arguments and free variables by name) and
``G`` the function's globals.  Every source renders two ways:

* ``name()`` -- a Python expression, e.g. ``L['self'].linear.weight`` or ``G['torch'].nn``;
* ``describe()`` -- a short human-readable path, e.g. ``self.linear.weight``, ``global torch.nn``.

Sources are frozen attrs records, hashable, so a tracer can key dictionaries on them and a
``GuardSet`` can merge duplicate guards.
"""

from __future__ import annotations

import collections
import keyword
import math
from collections.abc import Callable, Hashable
from enum import Enum
from typing import Any, ClassVar, TypeAlias

import attrs

from guards.errors import UnsupportedGuardValue

__all__ = [
    "Source",
    "LocalSource",
    "GlobalSource",
    "AttrSource",
    "ItemSource",
    "TypeSource",
    "SizeSource",
    "StrideSource",
    "CallSource",
    "MethodCallSource",
    "DictCopySource",
    "SetItemsSource",
    "InstanceAttrSource",
    "ClassDictSource",
    "class_dict_lookup",
    "is_literal",
]

#: Turns a constant that has no faithful literal form into the name it is bound to.
Binder: TypeAlias = Callable[[object, str], str]


def is_literal(value: object) -> bool:
    """True when ``repr(value)`` evaluates back to an equal value of the same type.

    Only such values are written into generated code as literals; anything else (enum
    members, classes, NaN, ...) is bound as a constant instead.
    """
    if value is None or type(value) in (bool, int, str, bytes):
        return True
    if type(value) is float:
        # nan never equals itself and inf has no literal.
        return math.isfinite(value)
    if type(value) is tuple:
        return all(is_literal(v) for v in value)
    return False


def _repr_binder(value: object, hint: str) -> str:
    if isinstance(value, type) and value.__module__ == "builtins":
        return value.__name__  # dict, object: names of builtins read back
    owner = getattr(value, "__objclass__", None)
    if isinstance(owner, type) and owner.__module__ == "builtins":
        # A C method of a builtin class (dict.copy, object.__getattribute__): its dotted name
        # is an expression (SHAPE predicates are built from names).
        return f"{owner.__name__}.{getattr(value, '__name__', '')}"
    return repr(value)


def _is_identifier(member: str) -> bool:
    return member.isidentifier() and not keyword.iskeyword(member)


@attrs.frozen
class Source:
    """Base of all sources.  Subclasses implement ``render``, ``describe`` and ``base``."""

    @property
    def base(self) -> Source | None:
        """The source this one is read from, or None for a root (local or global)."""
        return None

    def render(self, base_expr: str, bind: Binder) -> str:
        """The expression for this source given the expression of its base.

        ``bind`` turns constants with no faithful literal into bound names; generated check
        functions use it, while ``name()`` shows the plain ``repr``.
        """
        raise NotImplementedError

    def get(
        self, base_value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> object:
        """This source's value given its base's value (roots read ``f_locals``/``f_globals``)."""
        raise NotImplementedError

    def resolve(self, f_locals: dict[str, object], f_globals: dict[str, Any]) -> object:
        """Read this source's value from a frame: the same reads the generated check makes."""
        value: object = None
        for node in self.chain():
            value = node.get(value, f_locals, f_globals)
        return value

    def name(self) -> str:
        """This source as a Python expression over ``L`` and ``G``."""
        base = self.base
        return self.render(base.name() if base is not None else "", _repr_binder)

    def describe(self) -> str:
        """A short readable path (``self.linear.weight``, ``global torch``)."""
        raise NotImplementedError

    def chain(self) -> list[Source]:
        """This source and its bases, root first."""
        out: list[Source] = []
        node: Source | None = self
        while node is not None:
            out.append(node)
            node = node.base
        out.reverse()
        return out

    @property
    def depth(self) -> int:
        """Number of steps from the root (a local or global has depth 0)."""
        return len(self.chain()) - 1

    def root(self) -> Source:
        """The local or global this source starts from."""
        return self.chain()[0]

    def __str__(self) -> str:
        return self.name()


@attrs.frozen
class LocalSource(Source):
    """A name in the frame's ``f_locals`` at entry: an argument or a free variable."""

    local_name: str

    def get(
        self, base_value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> object:
        return f_locals[self.local_name]

    def render(self, base_expr: str, bind: Binder) -> str:
        return f"L[{self.local_name!r}]"

    def describe(self) -> str:
        return self.local_name


@attrs.frozen
class GlobalSource(Source):
    """A name in the function's globals dict (looked up when the guard runs, so rebinding shows)."""

    global_name: str

    def get(
        self, base_value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> object:
        return f_globals[self.global_name]

    def render(self, base_expr: str, bind: Binder) -> str:
        return f"G[{self.global_name!r}]"

    def describe(self) -> str:
        return f"global {self.global_name}"


@attrs.frozen
class _Derived(Source):
    """A source read from another one, ``base_source`` (every source but the roots)."""

    base_source: Source

    @property
    def base(self) -> Source:
        return self.base_source


@attrs.frozen
class AttrSource(_Derived):
    """``base.member``; members that are not identifiers render as ``getattr(base, 'm')``."""

    member: str

    def get(
        self, base_value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> object:
        return getattr(base_value, self.member)

    def render(self, base_expr: str, bind: Binder) -> str:
        if _is_identifier(self.member):
            return f"{base_expr}.{self.member}"
        return f"getattr({base_expr}, {self.member!r})"

    def describe(self) -> str:
        return f"{self.base_source.describe()}.{self.member}"


def _check_index(instance: object, attribute: object, value: object) -> None:
    if not isinstance(value, Hashable):
        raise UnsupportedGuardValue(
            f"ItemSource index must be hashable, got {type(value).__name__}"
        )
    try:
        hash(value)
    except TypeError as exc:
        raise UnsupportedGuardValue(f"ItemSource index {value!r} is not hashable") from exc


@attrs.frozen
class ItemSource(_Derived):
    """``base[index]`` for a constant hashable index (int, str, enum member, ...).

    Indices with a faithful literal (see ``is_literal``) are written as ``repr(index)``;
    others are bound as constants in generated code (``name()`` then shows their repr).
    """

    index: object = attrs.field(validator=_check_index)

    def get(
        self, base_value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> object:
        return base_value[self.index]  # type: ignore[index]

    def render(self, base_expr: str, bind: Binder) -> str:
        if is_literal(self.index):
            return f"{base_expr}[{self.index!r}]"
        return f"{base_expr}[{bind(self.index, 'key')}]"

    def describe(self) -> str:
        index = self.index
        text = f"{type(index).__name__}.{index.name}" if isinstance(index, Enum) else repr(index)
        return f"{self.base_source.describe()}[{text}]"


@attrs.frozen
class TypeSource(_Derived):
    """``type(base)``: lets a guard look at a value's class, e.g. a class attribute."""

    def get(
        self, base_value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> object:
        return type(base_value)

    def render(self, base_expr: str, bind: Binder) -> str:
        return f"type({base_expr})"

    def describe(self) -> str:
        return f"type({self.base_source.describe()})"


@attrs.frozen
class _DimQuery(_Derived):
    """``base.<query>(dim)`` of a tensor source; ``query`` is the subclass's method name."""

    dim: int
    query: ClassVar[str] = ""

    def get(
        self, base_value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> object:
        return getattr(base_value, self.query)(self.dim)

    def render(self, base_expr: str, bind: Binder) -> str:
        return f"{base_expr}.{self.query}({self.dim})"

    def describe(self) -> str:
        return f"{self.base_source.describe()}.{self.query}({self.dim})"


@attrs.frozen
class SizeSource(_DimQuery):
    """``base.size(dim)`` of a tensor source: what ShapeEnv symbols are bound to."""

    query: ClassVar[str] = "size"


@attrs.frozen
class StrideSource(_DimQuery):
    """``base.stride(dim)`` of a tensor source."""

    query: ClassVar[str] = "stride"


def _check_arguments(instance: object, attribute: object, value: object) -> None:
    try:
        hash(value)
    except TypeError as exc:
        raise UnsupportedGuardValue(f"call arguments {value!r} are not hashable") from exc


def _arguments(
    args: tuple[object, ...], kwargs: tuple[tuple[str, object], ...], bind: Binder
) -> str:
    parts = [repr(a) if is_literal(a) else bind(a, "arg") for a in args]
    parts += [f"{k}={v!r}" if is_literal(v) else f"{k}={bind(v, 'arg')}" for k, v in kwargs]
    return ", ".join(parts)


def _label(fn: object) -> str:
    module = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    # Builtins bound to an extension's function record have a meaningless qualname prefix.
    name = str(name).rsplit(".", 1)[-1] if "pybind11" in str(name) else str(name)
    return f"{module}.{name}" if module else name


@attrs.frozen
class CallSource(Source):
    """``fn(*args, **kwargs)`` now: the answer of a global-state query (``fn`` held, not looked
    up; the arguments are constants), e.g. ``torch.autograd._profiler_enabled()``.

    The guard calls ``fn`` on every check: only for functions without side effects.
    """

    fn: Any = attrs.field(eq=False)
    fn_id: int = attrs.field(init=False, repr=False)
    args: tuple[object, ...] = attrs.field(default=(), validator=_check_arguments)
    kwargs: tuple[tuple[str, object], ...] = attrs.field(default=(), validator=_check_arguments)

    @fn_id.default
    def _fn_id(self) -> int:
        return id(self.fn)

    def get(
        self, base_value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> object:
        return self.fn(*self.args, **dict(self.kwargs))

    def render(self, base_expr: str, bind: Binder) -> str:
        return f"{bind(self.fn, 'fn')}({_arguments(self.args, self.kwargs, bind)})"

    def name(self) -> str:
        return f"{_label(self.fn)}({_arguments(self.args, self.kwargs, _repr_binder)})"

    def describe(self) -> str:
        return self.name()


@attrs.frozen
class MethodCallSource(_Derived):
    """``base.method(*args, **kwargs)`` with constant arguments: a query on a value, e.g.
    ``L['x'].storage_offset()`` or ``L['x'].is_contiguous(memory_format=torch.channels_last)``.
    Only for methods without side effects (the guard calls it on every check)."""

    method: str
    args: tuple[object, ...] = attrs.field(default=(), validator=_check_arguments)
    kwargs: tuple[tuple[str, object], ...] = attrs.field(default=(), validator=_check_arguments)

    def get(
        self, base_value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> object:
        return getattr(base_value, self.method)(*self.args, **dict(self.kwargs))

    def render(self, base_expr: str, bind: Binder) -> str:
        call = f"({_arguments(self.args, self.kwargs, bind)})"
        if _is_identifier(self.method):
            return f"{base_expr}.{self.method}{call}"
        return f"getattr({base_expr}, {self.method!r}){call}"

    def describe(self) -> str:
        args = _arguments(self.args, self.kwargs, _repr_binder)
        return f"{self.base_source.describe()}.{self.method}({args})"


# -- reads that run no user code: a guard must not call a class's hooks or descriptors ---------


def plain_items(value: dict[Any, Any]) -> dict[Any, Any]:
    """A dict subclass's items as a plain dict, read from its storage, in its iteration order:
    an OrderedDict subclass's own (``move_to_end`` reorders its links, not the storage), its
    values through ``dict.__getitem__`` (``dict.copy`` would call a subclass's ``__getitem__``,
    and so would OrderedDict's items view)."""
    if isinstance(value, collections.OrderedDict):
        return {k: dict.__getitem__(value, k) for k in collections.OrderedDict.keys(value)}
    return dict(dict.items(value))


@attrs.frozen
class DictCopySource(_Derived):
    """``plain_items(base)``: a dict subclass's items as a plain dict in its order, read with no
    user code run."""

    def get(
        self, base_value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> object:
        return plain_items(base_value)  # type: ignore[arg-type]

    def render(self, base_expr: str, bind: Binder) -> str:
        return f"{bind(plain_items, 'plain_items')}({base_expr})"

    def describe(self) -> str:
        return f"dict.items({self.base_source.describe()})"


@attrs.frozen
class SetItemsSource(_Derived):
    """``tuple(base)`` of a set or frozenset: its elements in iteration order. Iterating a
    builtin set calls no element's ``__hash__``/``__eq__`` (guard the base's type first), so
    guards on the items (``ItemSource`` of this) pin each element by value or identity."""

    def get(
        self, base_value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> object:
        return tuple(base_value)  # type: ignore[arg-type]

    def render(self, base_expr: str, bind: Binder) -> str:
        return f"tuple({base_expr})"

    def describe(self) -> str:
        return f"tuple({self.base_source.describe()})"


@attrs.frozen
class InstanceAttrSource(_Derived):
    """``object.__getattribute__(base, member)``: an attribute read that bypasses the class's
    own ``__getattribute__`` (guards and the transformed code must not run user hooks, nor
    recurse into a compiled ``__getattribute__``)."""

    member: str

    def get(
        self, base_value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> object:
        return object.__getattribute__(base_value, self.member)

    def render(self, base_expr: str, bind: Binder) -> str:
        return f"{bind(object.__getattribute__, 'getattribute')}({base_expr}, {self.member!r})"

    def describe(self) -> str:
        return f"{self.base_source.describe()}.{self.member}"


def class_dict_lookup(cls: type, name: str) -> object:
    """``name`` as stored in the first class dict along ``cls.__mro__`` (a descriptor is
    returned, not called); AttributeError when no class defines it."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    raise AttributeError(name)


@attrs.frozen
class ClassDictSource(_Derived):
    """``member`` as stored in the class dicts along ``base.__mro__`` (``base`` is a class):
    a descriptor object itself, read without running its ``__get__``."""

    member: str

    def get(
        self, base_value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> object:
        return class_dict_lookup(base_value, self.member)  # type: ignore[arg-type]

    def render(self, base_expr: str, bind: Binder) -> str:
        return f"{bind(class_dict_lookup, 'class_dict')}({base_expr}, {self.member!r})"

    def describe(self) -> str:
        return f"{self.base_source.describe()}.__dict__[{self.member!r}]"
