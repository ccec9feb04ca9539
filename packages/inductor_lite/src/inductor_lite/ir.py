"""The loop IR: index expressions, value expressions and the nodes that own buffers.

A pointwise node is a function from an index (one variable per output dimension,
``i0, i1, ...``) to a value expression; a reduction node is a function from an output
index (``i0, ...``) and a reduction index (``r0, ...``) to the value being reduced.
Everything here is a frozen record so that nodes can be hashed, compared and printed.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch

from .symbolic import Size, floordiv, is_static

__all__ = [
    "BufferSpec",
    "DtypeRule",
    "FallbackNode",
    "IAdd",
    "IConst",
    "IDiv",
    "IExpr",
    "InputWrite",
    "IMod",
    "IMul",
    "ISym",
    "IValue",
    "IVar",
    "LoweredGraph",
    "Node",
    "Op",
    "OpKind",
    "OutputSpec",
    "PointwiseNode",
    "ReductionNode",
    "SymbolBinding",
    "TensorRef",
    "VCast",
    "VConst",
    "VExpr",
    "VIndex",
    "VLoad",
    "VOp",
    "affine",
    "contiguous_strides",
    "index_values",
    "iadd",
    "idiv",
    "imod",
    "imul",
    "isize",
    "subexpressions",
]


# ---------------------------------------------------------------- index expressions


@dataclass(frozen=True)
class IConst:
    value: int


@dataclass(frozen=True)
class IVar:
    name: str


@dataclass(frozen=True)
class ISym:
    """A size known only at run time (a sympy expression over the size symbols)."""

    expr: sympy.Expr


@dataclass(frozen=True)
class IAdd:
    terms: tuple[IExpr, ...]


@dataclass(frozen=True)
class IMul:
    a: IExpr
    c: Size


@dataclass(frozen=True)
class IDiv:
    """Floor division of a non-negative index by a positive constant (or size)."""

    a: IExpr
    c: Size


@dataclass(frozen=True)
class IMod:
    a: IExpr
    c: Size


@dataclass(frozen=True)
class IValue:
    """An index read from a tensor (embedding, gather): data dependent, never affine.

    ``bound`` is the size of the dimension it indexes; code checks ``0 <= v < bound``.
    """

    v: VExpr
    bound: Size


IExpr = IConst | IVar | IAdd | IMul | IDiv | IMod | IValue | ISym


def isize(x: Size) -> IExpr:
    """A size as an index expression."""
    return IConst(x) if is_static(x) else ISym(x)  # type: ignore[arg-type]


def iadd(*xs: IExpr) -> IExpr:
    """Sum of index expressions, folding constants and flattening nested sums."""
    terms: list[IExpr] = []
    const = 0
    for x in xs:
        parts = x.terms if isinstance(x, IAdd) else (x,)
        for p in parts:
            if isinstance(p, IConst):
                const += p.value
            else:
                terms.append(p)
    if const:
        terms.append(IConst(const))
    if not terms:
        return IConst(0)
    if len(terms) == 1:
        return terms[0]
    return IAdd(tuple(terms))


def imul(x: IExpr, c: Size) -> IExpr:
    """Index times a constant (or a symbolic size)."""
    if not is_static(c):
        if isinstance(x, IConst):
            return IConst(0) if x.value == 0 else ISym(c * x.value)  # type: ignore[operator]
        if isinstance(x, ISym):
            return ISym(x.expr * c)
        if isinstance(x, IAdd):
            return iadd(*(imul(t, c) for t in x.terms))
        if isinstance(x, IMul):
            return IMul(x.a, x.c * c)
        return IMul(x, c)
    if c == 0:
        return IConst(0)
    if c == 1:
        return x
    if isinstance(x, IConst):
        return IConst(x.value * c)
    if isinstance(x, ISym):
        return ISym(x.expr * c) if c != 0 else IConst(0)
    if isinstance(x, IMul):
        return imul(x.a, x.c * c)
    if isinstance(x, IAdd):
        return iadd(*(imul(t, c) for t in x.terms))
    return IMul(x, c)


def _quotient(x: IExpr, c: Size) -> Size | None:
    """``q`` where ``x`` is ``a * (q * c)``, provably (for a symbolic ``c``), else None."""
    if not isinstance(x, IMul):
        return None
    if not is_static(c):
        if is_static(x.c):
            return None
        q = floordiv(x.c, c)
        return q if sympy.expand(q * c - x.c) == 0 else None
    return floordiv(x.c, c) if x.c % c == 0 else None


def idiv(x: IExpr, c: Size) -> IExpr:
    """Floor division of a non-negative index by a positive constant (or size)."""
    if is_static(c):
        if c == 1:
            return x
        if isinstance(x, IConst):
            return IConst(x.value // c)
    q = _quotient(x, c)
    if q is None:
        return IDiv(x, c)
    assert isinstance(x, IMul)
    return imul(x.a, q)


def imod(x: IExpr, c: Size) -> IExpr:
    """Remainder of a non-negative index by a positive constant (or size)."""
    if is_static(c):
        if c == 1:
            return IConst(0)
        if isinstance(x, IConst):
            return IConst(x.value % c)
    return IMod(x, c) if _quotient(x, c) is None else IConst(0)


def affine(x: IExpr) -> tuple[dict[str, Size], Size] | None:
    """``x`` as ``sum(coef * var) + const``, or None when it is not affine.

    Coefficients and the constant may be symbolic sizes.
    """
    if isinstance(x, IConst):
        return {}, x.value
    if isinstance(x, ISym):
        return {}, x.expr
    if isinstance(x, IVar):
        return {x.name: 1}, 0
    if isinstance(x, IMul):
        inner = affine(x.a)
        if inner is None:
            return None
        return {k: v * x.c for k, v in inner[0].items()}, inner[1] * x.c
    if isinstance(x, IAdd):
        coefs: dict[str, Size] = {}
        const: Size = 0
        for t in x.terms:
            part = affine(t)
            if part is None:
                return None
            for k, v in part[0].items():
                coefs[k] = coefs.get(k, 0) + v
            const += part[1]
        return coefs, const
    return None


# ---------------------------------------------------------------- value expressions


@dataclass(frozen=True)
class VLoad:
    """Element ``index`` (a flat offset from the buffer's data pointer) of ``buf``."""

    buf: str
    index: IExpr
    dtype: torch.dtype


@dataclass(frozen=True)
class VConst:
    value: float | int | bool
    dtype: torch.dtype


@dataclass(frozen=True)
class VIndex:
    """An index expression used as a value (arange, iota)."""

    index: IExpr
    dtype: torch.dtype


class DtypeRule(enum.Enum):
    """What dtypes an ``Op`` computes in (``VOp.dtype``, its arguments' dtype but for ``BOOL``)."""

    ANY = "any"  # any dtype: the result has the arguments' dtype
    FLOAT = "float"  # floating dtypes only: lowerings compute an int input in a float dtype
    INTEGER = "integer"  # ints and bool only (bitwise ops)
    BOOL = "bool"  # the result is bool whatever the arguments' dtype (comparisons, logic)

    def admits(self, dtype: torch.dtype) -> bool:
        """Whether a ``VOp`` of this rule may have result dtype ``dtype``."""
        if self is DtypeRule.FLOAT:
            return dtype.is_floating_point
        if self is DtypeRule.INTEGER:
            return not dtype.is_floating_point and not dtype.is_complex
        if self is DtypeRule.BOOL:
            return dtype == torch.bool
        return True


class OpKind(enum.Enum):
    """Where an ``Op`` appears in the loop IR.

    Index arithmetic is no op: it is ``IExpr`` (``VIndex`` uses an index as a value, ``IValue``
    a value as an index), rendered by each backend's ``index``/``index_value``.
    """

    POINTWISE = "pointwise"  # a VOp: a function of one element of each argument
    REDUCTION = "reduction"  # a ReductionNode's combine, over its reduction index


_ANY, _FLOAT, _INT, _BOOL = DtypeRule.ANY, DtypeRule.FLOAT, DtypeRule.INTEGER, DtypeRule.BOOL
_REDUCTION = OpKind.REDUCTION


class Op(enum.StrEnum):
    """The scalar operations of the loop IR: the one list every backend renders.

    Each member declares its ``kind`` (pointwise: ``VOp.op``; reduction:
    ``ReductionNode.reduction``), its ``arity``, its ``dtype_rule`` and, for the binary
    operators that C++ and Python both write infix with the same symbol, that ``infix`` symbol.
    A member equals (and hashes as) its name string.

    Adding a pointwise op: a member here, a lowering that builds it (op_lowerings), and an
    ``op_<name>`` method on each backend's ``KernelBody`` (kernel_body.py; none for an
    ``infix`` op); a backend without the method fails when it is defined. A reduction: a
    member of kind REDUCTION and a case in each backend's reduction setup (cascade.py,
    triton_codegen.py). ``tests/test_op_vocabulary.py`` renders every op on every backend.
    """

    kind: OpKind
    arity: int
    dtype_rule: DtypeRule
    infix: str

    def __new__(
        cls,
        value: str,
        arity: int = 1,
        rule: DtypeRule = _ANY,
        infix: str = "",
        kind: OpKind = OpKind.POINTWISE,
    ) -> Op:
        member = str.__new__(cls, value)
        member._value_ = value
        member.kind = kind
        member.arity = arity
        member.dtype_rule = rule
        member.infix = infix
        return member

    @classmethod
    def of_kind(cls, kind: OpKind) -> tuple[Op, ...]:
        """The ops of ``kind``, in declaration order."""
        return tuple(op for op in cls if op.kind is kind)

    @property
    def to_bool(self) -> bool:
        """Whether the result is ``bool`` whatever the arguments' dtype."""
        return self.dtype_rule is DtypeRule.BOOL

    # arithmetic
    ADD = "add", 2, _ANY, "+"
    SUB = "sub", 2, _ANY, "-"
    MUL = "mul", 2, _ANY, "*"
    TRUEDIV = "truediv", 2, _FLOAT, "/"
    FLOOR_DIV = "floor_div", 2, _FLOAT
    REMAINDER = "remainder", 2, _FLOAT
    FMOD = "fmod", 2, _FLOAT
    POW = "pow", 2, _FLOAT
    ATAN2 = "atan2", 2, _FLOAT
    MAXIMUM = "maximum", 2
    MINIMUM = "minimum", 2
    CLAMP_LO = "clamp_lo", 2  # max(x, bound) that keeps a NaN x
    CLAMP_HI = "clamp_hi", 2  # min(x, bound) that keeps a NaN x
    # bitwise (ints and bools)
    AND = "and", 2, _INT, "&"
    OR = "or", 2, _INT, "|"
    XOR = "xor", 2, _INT, "^"
    BITWISE_NOT = "bitwise_not", 1, _INT
    # comparisons and logic: bool results
    EQ = "eq", 2, _BOOL, "=="
    NE = "ne", 2, _BOOL, "!="
    LT = "lt", 2, _BOOL, "<"
    LE = "le", 2, _BOOL, "<="
    GT = "gt", 2, _BOOL, ">"
    GE = "ge", 2, _BOOL, ">="
    LOGICAL_AND = "logical_and", 2, _BOOL
    LOGICAL_OR = "logical_or", 2, _BOOL
    LOGICAL_XOR = "logical_xor", 2, _BOOL
    LOGICAL_NOT = "logical_not", 1, _BOOL
    # unary math
    NEG = "neg"
    ABS = "abs"
    SIGN = "sign"
    RELU = "relu"
    RECIPROCAL = "reciprocal", 1, _FLOAT
    EXP = "exp", 1, _FLOAT
    EXP2 = "exp2", 1, _FLOAT
    EXPM1 = "expm1", 1, _FLOAT
    LOG = "log", 1, _FLOAT
    LOG2 = "log2", 1, _FLOAT
    LOG1P = "log1p", 1, _FLOAT
    SQRT = "sqrt", 1, _FLOAT
    RSQRT = "rsqrt", 1, _FLOAT
    SIN = "sin", 1, _FLOAT
    COS = "cos", 1, _FLOAT
    TANH = "tanh", 1, _FLOAT
    ATAN = "atan", 1, _FLOAT
    SIGMOID = "sigmoid", 1, _FLOAT
    ERF = "erf", 1, _FLOAT
    FLOOR = "floor", 1, _FLOAT  # an int input is its own floor: lowerings build no op
    CEIL = "ceil", 1, _FLOAT
    TRUNC = "trunc", 1, _FLOAT
    ROUND = "round", 1, _FLOAT
    # selection: where(cond, a, b), cond bool
    WHERE = "where", 3
    # reductions: fold a ReductionNode's body over its reduction index
    SUM = "sum", 1, _ANY, "", _REDUCTION
    PROD = "prod", 1, _ANY, "", _REDUCTION
    MAX = "max", 1, _ANY, "", _REDUCTION
    MIN = "min", 1, _ANY, "", _REDUCTION


@dataclass(frozen=True)
class VOp:
    """``op`` (a pointwise one) applied to ``args``; every arg already has the dtype the op
    computes in."""

    op: Op
    args: tuple[VExpr, ...]
    dtype: torch.dtype


@dataclass(frozen=True)
class VCast:
    x: VExpr
    dtype: torch.dtype


VExpr = VLoad | VConst | VIndex | VOp | VCast


def index_values(x: IExpr) -> list[VExpr]:
    """The data-dependent values (``IValue.v``) index ``x`` reads."""
    if isinstance(x, IValue):
        return [x.v]
    if isinstance(x, IAdd):
        return [v for t in x.terms for v in index_values(t)]
    if isinstance(x, IMul | IDiv | IMod):
        return index_values(x.a)
    return []


def subexpressions(v: VExpr, *, into_indices: bool = False) -> Iterator[VExpr]:
    """Each distinct subexpression of ``v`` once (shared subtrees by identity), depth first,
    last argument first. ``into_indices``: also those a data-dependent index reads (of a load,
    or of an index used as a value: scatter's checked target)."""
    stack: list[VExpr] = [v]
    seen: set[int] = set()
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        if isinstance(e, VOp):
            stack.extend(e.args)
        elif isinstance(e, VCast):
            stack.append(e.x)
        elif into_indices and isinstance(e, VLoad | VIndex):
            stack.extend(index_values(e.index))


# ---------------------------------------------------------------- buffers and nodes


def contiguous_strides(sizes: Sequence[Size]) -> tuple[Size, ...]:
    """Row-major strides for ``sizes`` (a symbolic size is >= 2)."""
    strides: list[Size] = []
    acc: Size = 1
    for s in reversed(sizes):
        strides.append(acc)
        acc = acc * (max(s, 1) if is_static(s) else s)  # type: ignore[call-overload]
    return tuple(reversed(strides))


@dataclass(frozen=True)
class BufferSpec:
    """A tensor the wrapper allocates (``torch.empty_strided``) or receives."""

    name: str
    sizes: tuple[Size, ...]
    strides: tuple[Size, ...]
    dtype: torch.dtype

    @property
    def numel(self) -> Size:
        return math.prod(self.sizes)


@dataclass(frozen=True)
class TensorRef:
    """A strided view of a buffer: how a fallback argument or an output is materialised."""

    buf: str
    sizes: tuple[Size, ...]
    strides: tuple[Size, ...]
    offset: Size
    dtype: torch.dtype


@dataclass(frozen=True)
class PointwiseNode:
    """Writes ``body(i0, ...)`` for every index of ``sizes`` into ``buf``.

    The element lands at ``offset + sum(i_k * strides[k])``. ``full_store`` is true when
    the node writes the whole buffer contiguously (the case fusion can reason about).
    A scatter (``index_put`` with ``accumulate``) adds ``store_index``, an index that reads a
    tensor (``IValue``), to that position, and ``accumulate`` adds the value to the element
    there instead of replacing it: several indices may name one element, so such a node never
    runs its rows (or an inner loop its index depends on) in parallel.
    """

    buf: str
    sizes: tuple[Size, ...]
    body: VExpr
    strides: tuple[Size, ...]
    offset: Size
    full_store: bool
    store_index: IExpr | None = None
    accumulate: bool = False


@dataclass(frozen=True)
class ReductionNode:
    """For each output index ``i`` (over ``out_sizes``) reduces ``body(i, r)`` over ``red_sizes``.

    The result is stored contiguously in ``buf`` (flat over ``out_sizes``); ``acc_dtype`` is
    what the accumulator holds, ``body.dtype`` what the buffer holds after conversion.
    """

    buf: str
    out_sizes: tuple[Size, ...]
    red_sizes: tuple[Size, ...]
    body: VExpr
    reduction: Op  # of kind REDUCTION
    dtype: torch.dtype

    def __post_init__(self) -> None:
        if self.reduction.kind is not OpKind.REDUCTION:
            raise ValueError(f"{self.reduction.value} is not a reduction")


@dataclass(frozen=True)
class FallbackNode:
    """An aten call from the wrapper. Tensor arguments are ``TensorRef``s (in ``args``).

    ``outputs`` names the buffers bound to the results (``None`` for results unused).
    ``binds`` names the size symbols the call defines (data-dependent sizes, ``item()``):
    ``(symbol, path)`` where ``path`` is Python reading it from the result written ``{}``
    (``"{}.size(0)"``, ``"{}[1].size(0)"``, ``"{}"`` for the result itself); the wrapper
    binds them right after the call.
    The target is an OpOverload, or a callable of ours (a ``torch.cond``'s branches).
    """

    target: Any  # an OpOverload or a callable: the torch boundary
    args: tuple[object, ...]
    kwargs: tuple[tuple[str, object], ...]
    outputs: tuple[BufferSpec | None, ...]
    multi_output: bool
    binds: tuple[tuple[str, str], ...] = ()


def may_alias_arguments(target: object) -> bool:
    """Whether a fallback's result may share memory with its arguments (a view op, by its
    schema). Our own callables (a cond's compiled branches) return fresh tensors."""
    schema = getattr(target, "_schema", None)
    return schema is not None and any(r.alias_info is not None for r in schema.returns)


Node = PointwiseNode | ReductionNode | FallbackNode


@dataclass(frozen=True)
class Origin:
    """An aten node a buffer's computation came from (see origins.py): its name, its target,
    and the user's source line (``File: f.py:14 in forward, code: ...``; "" when unknown)."""

    name: str
    target: str
    source: str


@dataclass(frozen=True)
class OutputSpec:
    """One flat graph output: a view of a buffer, or a non-tensor constant (a sympy
    expression: a value the wrapper computes; ``boolean``: returned as a bool, as eager
    returns a SymBool's value)."""

    ref: TensorRef | None
    constant: object = None
    boolean: bool = False


@dataclass(frozen=True)
class SymbolBinding:
    """Where a size symbol's value comes from at run time.

    ``dim`` is the size dimension of input ``input``, or None when that input is the
    (SymInt) scalar itself. ``hint`` is its value for the example inputs. ``boolean``: the
    input is a bool (a SymBool graph input, such as a cond predicate a backward takes), bound
    as 0 or 1.
    """

    symbol: sympy.Symbol
    input: int
    dim: int | None
    hint: int
    boolean: bool = False


@dataclass(frozen=True)
class InputWrite:
    """A graph input that gets a new value: ``copy_(input, value)`` after the graph ran.

    ``value`` is a view of a buffer the graph computed (already converted to the input's
    dtype and broadcast to its sizes). The wrapper either lets the kernel that produces it
    store straight into the input's memory, or copies it into the input at the end.
    """

    input: str  # the input's buffer name (``arg3``)
    value: TensorRef


@dataclass
class LoweredGraph:
    """Everything the scheduler and the wrapper need, in program order."""

    inputs: list[BufferSpec]
    constants: dict[str, torch.Tensor]
    buffers: dict[str, BufferSpec]
    nodes: list[Node]
    outputs: list[OutputSpec]
    device: torch.device
    symbols: list[SymbolBinding] = field(default_factory=list)
    # SymInt inputs by position: their value as an expression of the symbols
    scalar_inputs: dict[int, Size] = field(default_factory=dict)
    # 0-dim bool buffers that must all hold True after the call, else its results are
    # discarded and ``unguarded`` (the graph as it came, flat outputs) runs instead
    guards: list[TensorRef] = field(default_factory=list)
    unguarded: Callable[[Sequence[Any]], tuple[object, ...]] | None = None
    # new values of graph inputs (aot's final ``copy_`` nodes), in graph order
    input_writes: list[InputWrite] = field(default_factory=list)
    # each buffer's aten nodes and source lines, for comments in the generated code
    origins: dict[str, tuple[Origin, ...]] = field(default_factory=dict)
    # float inputs by position: the 0-dim float64 buffer the wrapper puts each in
    float_inputs: dict[int, str] = field(default_factory=dict)
