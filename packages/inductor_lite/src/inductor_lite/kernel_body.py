"""What the C++ and the Triton kernel bodies share: value expressions dispatched by type,
one temporary per distinct subexpression, and one method per pointwise ``ir.Op`` (reductions
are rendered by each backend's reduction setup: cascade.py, triton_codegen.py).

A backend subclasses ``KernelBody``. It renders each op in a method named ``op_<name>``
(``op_exp``, ``op_where``) that takes the ``VOp``, its arguments' rendered text and the
compute type, and returns the op's text (most are a ``template``); ops with an ``infix``
symbol share the backend's ``infix`` method. Ops a backend cannot render are listed in its
``missing`` (a graph using one runs that part eagerly). A subclass that lacks a method for
an op it does not list, or has one for an op it lists, fails when it is defined.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

import torch

from .errors import LoweringError
from .ir import IExpr, Op, OpKind, VCast, VConst, VExpr, VIndex, VLoad, VOp
from .symbolic import Size

__all__ = ["KernelBody", "OpRenderer", "flat_digits", "renderer_name", "template"]

# (the body, the op with its dtype, its arguments' text, the compute type) -> the op's text
OpRenderer = Callable[[Any, VOp, list[str], str], str]


def template(text: str) -> OpRenderer:
    """An op rendered by filling ``text``: ``{0}``, ``{1}``, ``{2}`` its arguments, ``{ct}``
    the compute type."""

    def render(self: object, v: VOp, a: list[str], ct: str) -> str:
        return text.format(*a, ct=ct)

    return render


def flat_digits(
    names: Sequence[str], sizes: Sequence[Size]
) -> Iterator[tuple[str, Size, Size, bool]]:
    """How each loop variable is recovered from a flat counter over ``sizes`` (row-major):
    (its name, its size, the product of the sizes after it, whether all before it are 1)."""
    for k, (name, size) in enumerate(zip(names, sizes, strict=True)):
        below: Size = 1
        for s in sizes[k + 1 :]:
            below *= s
        yield name, size, below, all(s == 1 for s in sizes[:k])


def renderer_name(op: Op) -> str:
    """The method of a ``KernelBody`` subclass that renders ``op``."""
    return f"op_{op.value}"


class KernelBody(abc.ABC):
    """Emits one kernel body's statements for value expressions (see the module doc)."""

    backend: ClassVar[str]
    missing: ClassVar[frozenset[Op]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for op in Op.of_kind(OpKind.POINTWISE):
            has = op.infix != "" or callable(getattr(cls, renderer_name(op), None))
            if has == (op in cls.missing):
                state = "lists as missing an op it renders" if has else "does not render"
                raise TypeError(f"{cls.__name__} {state}: {op.value}")

    def __init__(self, indent: str, params: dict[str, str]) -> None:
        self.lines: list[str] = []
        self.cache: dict[object, str] = {}
        self.indent = indent
        self.params = params
        self.counter = 0

    # ---------------------------------------------------------------- what a backend writes

    @abc.abstractmethod
    def compute_type(self, dtype: torch.dtype) -> str:
        """The type values of ``dtype`` are computed in."""

    @abc.abstractmethod
    def literal(self, value: object, dtype: torch.dtype) -> str: ...

    @abc.abstractmethod
    def index(self, x: IExpr) -> str: ...

    @abc.abstractmethod
    def index_value(self, v: VIndex) -> str: ...

    @abc.abstractmethod
    def load(self, v: VLoad) -> str: ...

    @abc.abstractmethod
    def cast(self, v: VCast, x: str) -> str:
        """``x`` (the rendered ``v.x``) converted to ``v.dtype``, bound to a temporary."""

    @abc.abstractmethod
    def bind(self, v: VOp, text: str) -> str:
        """A temporary holding ``text``, the value of ``v``."""

    @abc.abstractmethod
    def infix(self, v: VOp, a: list[str], ct: str) -> str:
        """``a[0] <v.op.infix> a[1]`` in the compute type ``ct``."""

    # ---------------------------------------------------------------- shared

    def value(self, v: VExpr) -> str:
        """The text of ``v``: a literal or a temporary, each subexpression rendered once."""
        hit = self.cache.get(v)
        if hit is None:
            hit = self.cache[v] = self.render(v)
        return hit

    def render(self, v: VExpr) -> str:
        if isinstance(v, VConst):
            return self.literal(v.value, v.dtype)
        if isinstance(v, VIndex):
            return self.index_value(v)
        if isinstance(v, VLoad):
            return self.load(v)
        if isinstance(v, VCast):
            return self.cast(v, self.value(v.x))
        return self.bind(v, self.op(v, [self.value(a) for a in v.args]))

    def op(self, v: VOp, a: list[str]) -> str:
        """The text of ``v.op`` over the arguments' text ``a``."""
        ct = self.compute_type(v.dtype)
        if v.op.infix:
            return self.infix(v, a, ct)
        render: Callable[[VOp, list[str], str], str] | None = getattr(
            self, renderer_name(v.op), None
        )
        if render is None:
            raise LoweringError(f"no {self.backend} lowering for op {v.op.value}")
        return render(v, a, ct)
