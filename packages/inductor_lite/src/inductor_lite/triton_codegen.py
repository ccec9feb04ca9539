"""Triton code generation (CUDA tensors; tested on CPU under ``TRITON_INTERPRET=1``).

The same schedule as the C++ path: a kernel is a loop over rows with steps inside. Here
each program handles ``XBLOCK`` rows; a step with an inner loop walks it in ``RBLOCK``
chunks as a 2-D tile (a single chunk when the row fits: the persistent form), masking the
tail. Reductions accumulate a tile and reduce it along the chunk axis at the end. A step
that reads a buffer written earlier in the same program waits at a barrier first.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .errors import LoweringError
from .ir import (
    BufferSpec,
    IAdd,
    IConst,
    IDiv,
    IExpr,
    IMod,
    IMul,
    ISym,
    IValue,
    IVar,
    Op,
    PointwiseNode,
    ReductionNode,
    VCast,
    VIndex,
    VLoad,
    VOp,
)
from .kernel_body import KernelBody, OpRenderer, flat_digits, template
from .scheduler import Kernel, Step, iter_loads, kernel_symbols
from .symbolic import Size, is_static, same, tritonexpr

__all__ = ["TritonKernelSource", "block_candidates", "generate_triton"]

_TL = {
    torch.float32: "tl.float32",
    torch.float64: "tl.float64",
    torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16",
    torch.int64: "tl.int64",
    torch.int32: "tl.int32",
    torch.int16: "tl.int16",
    torch.int8: "tl.int8",
    torch.uint8: "tl.uint8",
    torch.bool: "tl.int1",
}


def _compute(dtype: torch.dtype) -> str:
    if dtype in (torch.float16, torch.bfloat16):
        return "tl.float32"
    try:
        return _TL[dtype]
    except KeyError:
        raise LoweringError(f"no Triton type for {dtype}") from None


def _literal(value: object, dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "1" if value else "0"
    if dtype.is_floating_point:
        v = float(value)  # type: ignore[arg-type]
        if math.isnan(v):
            return "float('nan')"
        if math.isinf(v):
            return "float('inf')" if v > 0 else "float('-inf')"
        if v == 0 and math.copysign(1.0, v) < 0 and dtype in _NEGATIVE_ZERO_BITS:
            # Triton makes a -0.0 constant (literal or negated zero) +0.0 (x / -0.0 then has
            # the wrong sign): the sign bit alone, bitcast to the float type
            bits, ints = _NEGATIVE_ZERO_BITS[dtype]
            return f"tl.full([1], {bits}, {ints}).to({_TL[dtype]}, bitcast=True)"
        return repr(v)
    return str(int(value))  # type: ignore[call-overload]


_NEGATIVE_ZERO_BITS = {
    torch.float16: (-(2**15), "tl.int16"),
    torch.bfloat16: (-(2**15), "tl.int16"),
    torch.float32: (-(2**31), "tl.int32"),
    torch.float64: (-(2**63), "tl.int64"),
}


def _extremum(fn: str) -> OpRenderer:
    def render(self: _Body, v: VOp, a: list[str], ct: str) -> str:
        nan = ", propagate_nan=tl.PropagateNan.ALL" if v.dtype.is_floating_point else ""
        return f"{fn}({a[0]}, {a[1]}{nan})"

    return render


class _Body(KernelBody):
    backend = "Triton"
    # no Triton for these yet: a graph using them runs that part eagerly (README, "Missing")
    missing = frozenset({Op.POW, Op.FMOD, Op.ATAN2, Op.ATAN})

    def __init__(  # noqa: PLR0917
        self,
        indent: str,
        params: dict[str, str],
        mask: str,
        regs: dict[str, str] | None = None,
        prefix: str = "t",
        rows: dict[str, _RowValue] | None = None,
        tile: _Tile | None = None,
        var_names: dict[str, str] | None = None,
    ) -> None:
        super().__init__(indent, params)
        self.mask = mask
        # reduction results of this program, still in registers: buffer -> variable
        self.regs = regs or {}
        # tiles of earlier steps still in registers (persistent kernels), and this step's tile
        self.rows = rows or {}
        self.tile = tile
        self.memory_reads: set[str] = set()  # buffers this body reads from memory
        self.prefix = prefix
        # index variables as this step's code names them (see _kernel: unique per step in
        # looped kernels)
        self.var_names = var_names or {}

    def tmp(self, expr: str) -> str:
        name = f"{self.prefix}{self.counter}"
        self.counter += 1
        self.lines.append(f"{self.indent}{name} = {expr}")
        return name

    def index(self, x: IExpr) -> str:
        if isinstance(x, IConst):
            return str(x.value)
        if isinstance(x, IVar):
            return self.var_names.get(x.name, x.name)
        if isinstance(x, IAdd):
            return "(" + " + ".join(self.index(t) for t in x.terms) + ")"
        if isinstance(x, IMul):
            return f"({self.index(x.a)} * {tritonexpr(x.c)})"
        if isinstance(x, IDiv):
            return f"({self.index(x.a)} // {tritonexpr(x.c)})"
        if isinstance(x, IMod):
            return f"({self.index(x.a)} % {tritonexpr(x.c)})"
        if isinstance(x, ISym):
            return tritonexpr(x.expr)
        if isinstance(x, IValue):
            # clamped so that no bad index reads outside the tensor (no error is raised here)
            v = self.value(x.v)
            if not v.startswith("t"):  # a literal index (gather by zeros): give it a tile
                v = f"tl.full([1, 1], {v}, tl.int64)"
            return f"tl.minimum(tl.maximum({v}.to(tl.int64), 0), {tritonexpr(x.bound - 1)})"
        raise LoweringError(f"unknown index expression {x!r}")

    def compute_type(self, dtype: torch.dtype) -> str:
        return _compute(dtype)

    def literal(self, value: object, dtype: torch.dtype) -> str:
        _compute(dtype)  # a dtype Triton has no type for fails here, as every value of it
        return _literal(value, dtype)

    def index_value(self, v: VIndex) -> str:
        ct = _compute(v.dtype)
        if isinstance(v.index, ISym):
            # a size as a value: a tensor whatever the symbols are (constexpr ints when
            # interpreted, scalars when compiled)
            return self.tmp(f"tl.full([1, 1], {self.index(v.index)}, tl.int64).to({ct})")
        return self.tmp(f"({self.index(v.index)}).to({ct})")

    def load(self, v: VLoad) -> str:
        ct = _compute(v.dtype)
        if v.buf in self.regs:
            # the scheduler only lets a kernel read its own reduction at the current row
            return self.tmp(f"{self.regs[v.buf]}.to({ct})")
        row = self.rows.get(v.buf)
        if (
            row is not None
            and self.tile is not None
            and row.tile == self.tile
            and _linear(v.index, self.tile.axes) == row.form
        ):
            # the element this lane would load is the one it computed and stored
            return self.tmp(f"{row.var}.to({ct})")
        self.memory_reads.add(v.buf)
        ptr = self.params[v.buf]
        other = "0" if not v.dtype.is_floating_point else "0.0"
        if not _has_var(v.index):
            # one element for every lane (x[0, 0]): a scalar load, in bounds by construction;
            # a block mask on a scalar pointer is an error in Triton
            return self.tmp(f"tl.load({ptr} + {self.index(v.index)}).to({ct})")
        raw = f"tl.load({ptr} + {self.index(v.index)}, mask={self.mask}, other={other})"
        return self.tmp(f"{raw}.to({ct})")

    def cast(self, v: VCast, x: str) -> str:
        if v.dtype == torch.bool:
            return self.tmp(f"({x} != 0)")
        if v.dtype in (torch.float16, torch.bfloat16):
            source = getattr(v.x, "dtype", None)
            if isinstance(source, torch.dtype) and not source.is_floating_point:
                # an integer through float32 first, as eager converts it; Triton's interpreter
                # turns an int64 straight into bfloat16 garbage (NaN for -1; the op fuzzer)
                x = f"({x}).to(tl.float32)"
            return self.tmp(f"({x}).to({_TL[v.dtype]}).to(tl.float32)")
        return self.tmp(f"({x}).to({_compute(v.dtype)})")

    def bind(self, v: VOp, text: str) -> str:
        return self.tmp(text)

    # ---------------------------------------------------------------- one method per ir.Op

    def infix(self, v: VOp, a: list[str], ct: str) -> str:
        return f"({a[0]} {v.op.infix} {a[1]}).to({ct})"

    op_exp = template("(tl.exp({0})).to({ct})")
    op_exp2 = template("(tl.exp2({0})).to({ct})")
    op_expm1 = template("((tl.exp({0}) - 1.0)).to({ct})")
    op_log = template("(tl.log({0})).to({ct})")
    op_log2 = template("(tl.log2({0})).to({ct})")
    op_log1p = template("(tl.log(1.0 + {0})).to({ct})")
    op_sqrt = template("(tl.sqrt({0})).to({ct})")
    op_rsqrt = template("(tl.rsqrt({0})).to({ct})")
    op_sin = template("(tl.sin({0})).to({ct})")
    op_cos = template("(tl.cos({0})).to({ct})")
    op_erf = template("(tl.erf({0})).to({ct})")
    op_sigmoid = template("(tl.sigmoid({0})).to({ct})")
    op_tanh = template("((2.0 * tl.sigmoid(2.0 * {0}) - 1.0)).to({ct})")
    op_floor = template("(tl.floor({0})).to({ct})")
    op_ceil = template("(tl.ceil({0})).to({ct})")
    op_trunc = template("(tl.where({0} < 0, tl.ceil({0}), tl.floor({0}))).to({ct})")
    op_neg = template("((-{0})).to({ct})")
    op_abs = template("(tl.abs({0})).to({ct})")
    op_reciprocal = template("((1.0 / {0})).to({ct})")
    op_relu = template("(tl.where({0} < 0, 0, {0})).to({ct})")
    op_logical_not = template("(({0} == 0)).to({ct})")
    op_bitwise_not = template("((~{0})).to({ct})")
    # eager's sign, (0 < x) - (x < 0): NaN gives 0 and -0.0 gives +0.0
    op_sign = template("(tl.where({0} > 0, 1, tl.where({0} < 0, -1, 0)).to({0}.dtype)).to({ct})")
    op_maximum = _extremum("tl.maximum")
    op_minimum = _extremum("tl.minimum")
    op_clamp_lo = template("tl.where({0} < {1}, {1}, {0}).to({ct})")
    op_clamp_hi = template("tl.where({0} > {1}, {1}, {0}).to({ct})")
    op_logical_and = template("(({0} != 0) & ({1} != 0))")
    op_logical_or = template("(({0} != 0) | ({1} != 0))")
    op_logical_xor = template("(({0} != 0) != ({1} != 0))")
    op_where = template("tl.where({0}, {1}, {2}).to({ct})")
    op_floor_div = template("tl.floor({0} / {1})")
    op_remainder = template("({0} - tl.floor({0} / {1}) * {1})")

    def op_round(self, v: VOp, a: list[str], ct: str) -> str:
        return f"({_round_half_even(a[0])}).to({ct})"


def _round_half_even(x: str) -> str:
    """eager's round: to nearest, ties to even, the sign of a zero kept (-0.4 gives -0.0).
    ``x - floor(x)`` is exact; libdevice's rint would do it on GPUs, but Triton's interpreter
    lacks it."""
    f = f"tl.floor({x})"
    odd = f"({f} - 2.0 * tl.floor(0.5 * {f}))"  # 1.0 for an odd floor, else 0.0
    up = f"tl.where({x} - {f} > 0.5, 1.0, tl.where({x} - {f} == 0.5, {odd}, 0.0))"
    r = f"({f} + {up})"
    return f"tl.where({r} == 0, {x} * 0.0, {r})"


@dataclass(frozen=True)
class _Tile:
    """The iteration space of one step of a persistent kernel: the sizes of its outer (program)
    and inner (tile column) dimensions; ``axes`` maps its variable names to their position."""

    outer: tuple[Size, ...]
    inner: tuple[Size, ...]
    axes: tuple[tuple[str, str], ...]

    @staticmethod
    def of(step: Step) -> _Tile:
        names = step.var_names
        axes = [(n, f"o{k}") for k, n in enumerate(names[: step.split])]
        axes += [(n, f"r{k}") for k, n in enumerate(names[step.split :])]
        return _Tile(tuple(step.outer_sizes), tuple(step.inner_sizes), tuple(axes))

    def __eq__(self, other: object) -> bool:  # the names do not matter, the space does
        return isinstance(other, _Tile) and (self.outer, self.inner) == (other.outer, other.inner)

    def __hash__(self) -> int:
        return hash((self.outer, self.inner))


@dataclass(frozen=True)
class _RowValue:
    """A pointwise step's value kept in a register tile: its variable and where it was stored
    (a linear form over tile positions)."""

    var: str
    tile: _Tile
    form: tuple[tuple[str, int], ...]


def _linear(x: IExpr, axes: tuple[tuple[str, str], ...]) -> tuple[tuple[str, int], ...] | None:
    """``x`` as constant coefficients over tile positions (``o0``, ``r0``, ...; ``""`` for the
    constant term), sorted; None when it is not an affine function of them with int terms."""
    where = dict(axes)
    acc: dict[str, int] = {}

    def walk(e: IExpr, scale: int) -> bool:
        if isinstance(e, IConst) and isinstance(e.value, int):
            acc[""] = acc.get("", 0) + scale * e.value
            return True
        if isinstance(e, IVar) and e.name in where:
            acc[where[e.name]] = acc.get(where[e.name], 0) + scale
            return True
        if isinstance(e, IAdd):
            return all(walk(t, scale) for t in e.terms)
        if isinstance(e, IMul) and isinstance(e.c, int):
            return walk(e.a, scale * e.c)
        return False

    if not walk(x, 1):
        return None
    return tuple(sorted((k, c) for k, c in acc.items() if c != 0))


def _store_form(node: PointwiseNode, tile: _Tile) -> tuple[tuple[str, int], ...] | None:
    if not isinstance(node.offset, int) or not all(isinstance(s, int) for s in node.strides):
        return None
    acc: dict[str, int] = {"": node.offset}
    for (_, pos), stride in zip(tile.axes, node.strides, strict=True):
        acc[pos] = acc.get(pos, 0) + stride  # type: ignore[operator]
    return tuple(sorted((k, c) for k, c in acc.items() if c != 0))


def _has_var(x: IExpr) -> bool:
    """Whether ``x`` varies over the tile (a loop variable or a loaded index in it)."""
    if isinstance(x, IVar | IValue):
        return True
    if isinstance(x, IAdd):
        return any(_has_var(t) for t in x.terms)
    if isinstance(x, IMul | IDiv | IMod):
        return _has_var(x.a)
    return False


def _var_defs(names: Sequence[str], sizes: Sequence[Size], flat: str, indent: str) -> list[str]:
    out: list[str] = []
    for name, size, below, leading in flat_digits(names, sizes):
        if size == 1:
            expr = f"{flat} * 0"
        elif same(below, 1) and leading:
            expr = flat
        else:
            expr = f"(({flat} // {tritonexpr(below)}) % {tritonexpr(size)})"
        out.append(f"{indent}{name} = {expr}")
    return out


@dataclass(frozen=True)
class TritonKernelSource:
    name: str
    params: tuple[str, ...]
    rows: Size  # symbolic: the launcher evaluates it on the symbols' values per call
    max_inner: int  # for a symbolic row length, a guess (only block sizes depend on it)
    persistent: bool
    symbols: tuple[str, ...] = ()  # size symbols, plain int arguments after the tensors
    stores: tuple[str, ...] = ()  # the params the kernel writes (restored after autotuning)
    # the earlier kernel of the module this one is a renamed copy of (the same program over
    # other buffers: a model's repeated blocks); it is that kernel's function, compiled and
    # tuned once
    same_as: str = ""
    # every step pointwise (no row reduction): its block size is chosen, not timed
    pointwise: bool = False


PERSISTENT_LIMIT = 4096
SYMBOLIC_ROW_GUESS = 1024
# Programs a pointwise kernel should launch at least (two waves of an H100's 132 SMs) before
# it takes larger blocks.
_MIN_PROGRAMS = 256


def block_candidates(
    rows: int, max_inner: int, persistent: bool, pointwise: bool = False
) -> list[tuple[int, int]]:
    """(XBLOCK, RBLOCK) pairs worth timing for a kernel of this shape.

    A pointwise kernel gets one: each candidate is a Triton compile of its own, and over a
    whole block of elements per program the choice matters little for a kernel that only
    streams memory (a pointwise chain's first call compiled four). Reductions are timed, over
    at most two candidates, since each is a Triton compile that the first call waits for.

    A persistent reduction takes the rows a program holds (XBLOCK) so that it works on 1,024
    to 2,048 elements, or up to two rows when a row is longer: timing every XBLOCK from 1 to 8
    on an H100 (rows of 128 to 4,096 elements, 256 to 65,536 rows; layer norm + softmax and
    RMS norm) always found the best within that band or within 4% of it, and the candidates
    outside it lost up to 3x (one row of 128 per program). A looped reduction keeps its two
    widest chunks, where those measurements found the winner (4,096 elements of one row).
    """
    if pointwise:
        return [_pointwise_blocks(rows, max_inner, persistent)]
    if max_inner <= 1:
        return [(128, 1), (1024, 1)]
    full = 1 << max(0, (max_inner - 1).bit_length())
    if persistent:
        top = max(2048, 2 * full)
        band = [
            (x, full)
            for x in (1, 2, 4, 8)
            if 1024 <= x * full <= top and (x == 1 or x * full <= 8192)
        ]
        return band or [(8, full)]
    cands = [(1, min(full, 4096)), (4, min(full, 512))]
    out: list[tuple[int, int]] = []
    for c in cands:
        if c not in out:
            out.append(c)
    return out


def _pointwise_blocks(rows: int, max_inner: int, persistent: bool) -> tuple[int, int]:
    """The block of a pointwise kernel: up to 1024 elements a program (Triton's usual
    streaming block, 8 elements a thread at 4 warps), fewer when that would launch too few
    programs to fill the GPU."""
    if max_inner <= 1:
        return (1024, 1) if rows >= 1024 * _MIN_PROGRAMS else (128, 1)
    full = 1 << max(0, (max_inner - 1).bit_length())
    if not persistent:
        return (1, min(full, 4096))
    x = 1
    for c in (2, 4, 8):
        if c * full <= 1024 and rows >= c * _MIN_PROGRAMS:
            x = c
    return (x, full)


def _reduction_lines(step: Step, n: int, body: _Body, acc: str, ct: str) -> tuple[str, str, str]:
    node = step.node
    assert isinstance(node, ReductionNode)
    if node.reduction is Op.SUM:
        return f"tl.full([XBLOCK, RBLOCK], 0, {ct})", f"{acc} + {{v}}", f"tl.sum({acc}, 1)"
    if node.reduction not in (Op.MAX, Op.MIN):  # prod: not generated for Triton
        raise LoweringError(f"no Triton reduction for {node.reduction.value}")
    is_max = node.reduction is Op.MAX
    if node.dtype.is_floating_point:
        init = "float('-inf')" if is_max else "float('inf')"
    else:
        info = torch.iinfo(node.dtype)
        init = str(info.min if is_max else info.max)
    fn = "tl.maximum" if is_max else "tl.minimum"
    red = "tl.max" if is_max else "tl.min"
    nan = ", propagate_nan=tl.PropagateNan.ALL" if node.dtype.is_floating_point else ""
    final = f"{red}({acc}, 1)"
    if node.dtype.is_floating_point:
        # tl.max does not propagate NaN: count NaNs alongside
        final = (
            f"tl.where(tl.sum(({acc} != {acc}).to(tl.int32), 1) > 0, float('nan'), {red}({acc}, 1))"
        )
    return f"tl.full([XBLOCK, RBLOCK], {init}, {ct})", f"{fn}({acc}, {{v}}{nan})", final


def _kernel(
    kernel: Kernel,
    buffers: dict[str, BufferSpec],
    interpret: bool = False,
    elide: frozenset[str] = frozenset(),
) -> tuple[str, TritonKernelSource, set[str]]:
    """The kernel's source, its launch record, and the buffers it reads from memory.

    ``elide``: buffers this kernel writes that nothing reads from memory (no other item reads
    them, and each of this kernel's reads is served from registers): their stores and
    pointers are left out, so they need no memory at all.
    """
    if any(isinstance(s.node, PointwiseNode) and s.node.store_index for s in kernel.steps):
        raise LoweringError("no Triton scatter (index_put's lowering is for C++ only)")
    used: list[str] = []
    for step in kernel.steps:
        for name in [step.node.buf, *(ld.buf for ld in iter_loads(step.node))]:
            if name not in used and name not in elide:
                used.append(name)
    memory_reads: set[str] = set()
    params = {name: f"p_{name}" for name in used}
    inners = [s.inner_numel for s in kernel.steps]
    symbolic_inner = not all(is_static(n) for n in inners)
    # a symbolic row length loops over RBLOCK chunks; 1024 only steers the block sizes tried
    max_inner = max((n if is_static(n) else SYMBOLIC_ROW_GUESS for n in inners), default=1)  # type: ignore[type-var]
    # persistent: every row fits one block, so inner loops disappear (RBLOCK >= max_inner)
    persistent = not symbolic_inner and 1 < max_inner <= PERSISTENT_LIMIT
    symbols = kernel_symbols(kernel)
    regs: dict[str, str] = {}
    ind2 = "    " if persistent else "        "

    def open_inner(inner: Size) -> list[str]:
        n = tritonexpr(inner)
        if persistent:
            return ["    ri = tl.arange(0, RBLOCK)[None, :]", f"    m = omask & (ri < {n})"]
        return [
            f"    for rb in range(0, {n}, RBLOCK):",
            "        ri = rb + tl.arange(0, RBLOCK)[None, :]",
            f"        m = omask & (ri < {n})",
        ]

    # the symbols are plain (not constexpr) arguments: one compiled kernel for all sizes.
    # Interpreted, they are constexpr: triton 3.6's interpreter turns an int argument into a
    # 1-element array that `range` cannot take under numpy 2.4 (fixed in later tritons); the
    # interpreter compiles nothing, so constexpr costs nothing there
    sym_params = [f"{s}: tl.constexpr" if interpret else s for s in symbols]
    sig = ", ".join([*params.values(), *sym_params, "XBLOCK: tl.constexpr", "RBLOCK: tl.constexpr"])
    lines = ["@triton.jit", f"def {kernel.name}({sig}):"]
    lines.append("    o = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]")
    lines.append(f"    omask = o < {tritonexpr(kernel.outer_numel)}")
    written: set[str] = set()
    # persistent kernels: each pointwise step's tile stays in registers, and a later step over
    # the same tile that loads the element it stored takes the register (layer_norm then
    # softmax reads the normalised row three times otherwise, through memory and barriers)
    rows: dict[str, _RowValue] = {}
    for n, step in enumerate(kernel.steps):
        node = step.node
        tile = _Tile.of(step) if persistent and len(step.inner_sizes) > 0 else None
        barrier_at = len(lines)
        written_before = set(written)
        written.add(node.buf)
        # Looped kernels: a name bound before an ``rb`` loop and bound again inside it is a
        # loop-carried variable to triton, which must keep one type -- a step outside the
        # loops binds [XBLOCK, 1] tiles, one inside binds [XBLOCK, RBLOCK]. So in those kernels
        # each step's index variables and temporaries have names of their own.
        rename = {} if persistent else {v: f"{v}_{n}" for v in step.var_names}
        prefix = "t" if persistent else f"t{n}_"
        names = [rename.get(v, v) for v in step.var_names]
        lines.append(f"    # step {n}: {type(node).__name__} -> {node.buf}")
        lines += _var_defs(names[: step.split], step.outer_sizes, "o", "    ")
        has_inner = len(step.inner_sizes) > 0
        inner = step.inner_numel
        store_ptr = params.get(node.buf, "")
        out_ty = _TL[buffers[node.buf].dtype]
        if isinstance(node, PointwiseNode):
            idx = " + ".join(
                [tritonexpr(node.offset)]
                + [
                    f"{v} * {tritonexpr(s)}"
                    for v, s in zip(names, node.strides, strict=True)
                    if s != 0
                ]
            )
            # the pointer must be a block of the tile's shape even where no dim moves it (a
            # 0-dim result such as a full reduction's mean): the tile's lanes are masked anyway
            if not any(s != 0 for s in node.strides[: step.split]):
                idx += " + o * 0"
            if has_inner and not any(s != 0 for s in node.strides[step.split :]):
                idx += " + ri * 0"
            if has_inner:
                lines += open_inner(inner)
                lines += _var_defs(names[step.split :], step.inner_sizes, "ri", ind2)
                body = _Body(
                    ind2, params, "m", regs, prefix, rows=rows, tile=tile, var_names=rename
                )
            else:
                # omask itself, not a copy in ``m``: ``m`` is bound in the loops (see above)
                body = _Body("    ", params, "omask", regs, prefix, var_names=rename)
            val = body.value(node.body)
            lines += body.lines
            if not val.startswith("t"):  # a literal: give it the tile's shape
                shape = "[XBLOCK, RBLOCK]" if has_inner else "[XBLOCK, 1]"
                val = f"tl.full({shape}, {val}, {_compute(node.body.dtype)})"
            form = _store_form(node, tile) if tile is not None else None
            if tile is not None and form is not None:
                lines.append(f"{body.indent}row{n} = ({val}).to({out_ty})")
                rows[node.buf] = _RowValue(f"row{n}", tile, form)
                val = f"row{n}"
            if node.buf not in elide:
                lines.append(
                    f"{body.indent}tl.store({store_ptr} + {idx}, ({val}).to({out_ty}), "
                    f"mask={body.mask})"
                )
        else:
            acc = f"acc{n}"
            ct = _compute(node.dtype)
            body = _Body(ind2, params, "m", regs, prefix, rows=rows, tile=tile, var_names=rename)
            init, combine, final = _reduction_lines(step, n, body, acc, ct)
            lines.append(f"    {acc} = {init}")
            lines += open_inner(inner)
            lines += _var_defs(names[step.split :], step.inner_sizes, "ri", ind2)
            val = body.value(node.body)
            lines += body.lines
            if not val.startswith("t"):
                val = f"tl.full([XBLOCK, RBLOCK], {val}, {ct})"
            lines.append(f"{ind2}{acc} = tl.where(m, {combine.format(v=val)}, {acc})")
            lines.append(f"    res{n} = ({final})[:, None]")
            if node.buf not in elide:
                lines.append(f"    tl.store({store_ptr} + o, res{n}.to({out_ty}), mask=omask)")
            regs[node.buf] = f"res{n}"
        memory_reads |= body.memory_reads
        if body.memory_reads & written_before:  # a read of this program's own stores
            lines.insert(barrier_at, "    tl.debug_barrier()")
    return (
        "\n".join(lines),
        TritonKernelSource(
            kernel.name,
            tuple(used),
            kernel.outer_numel,
            max_inner,
            persistent,
            symbols,
            tuple(
                dict.fromkeys(step.node.buf for step in kernel.steps if step.node.buf not in elide)
            ),
            pointwise=all(isinstance(step.node, PointwiseNode) for step in kernel.steps),
        ),
        memory_reads,
    )


def _canonical(text: str, kernel: Kernel) -> str:
    """The kernel's text with its name and every buffer name replaced by its position of
    first use: equal for two kernels running the same program over other buffers."""
    names: list[str] = []
    for step in kernel.steps:
        for name in [step.node.buf, *(ld.buf for ld in iter_loads(step.node))]:
            if name not in names:
                names.append(name)
    text = text.replace(f"def {kernel.name}(", "def KERNEL(", 1)
    if not names:
        return text
    index = {name: k for k, name in enumerate(names)}
    pattern = re.compile(
        r"(?<![A-Za-z0-9])("
        + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
        + r")(?![A-Za-z0-9])"
    )
    return pattern.sub(lambda m: f"B{index[m.group(1)]}", text)


def generate_triton(
    kernels: Sequence[Kernel],
    buffers: dict[str, BufferSpec],
    *,
    interpret: bool = False,
    local: dict[str, frozenset[str]] | None = None,
) -> tuple[str, list[TritonKernelSource]]:
    """A Python module with one ``@triton.jit`` function per kernel.

    ``interpret``: the module runs under ``TRITON_INTERPRET=1`` (size symbols then become
    constexpr parameters, see ``_kernel``). ``local``: per kernel name, the buffers it writes
    that no other schedule item reads and that are no graph result
    (``wrapper.kernel_local_buffers``); those the kernel itself only reads from registers
    (a persistent row kernel's layer_norm output feeding its softmax, its row statistics)
    are never stored: no memory traffic, no allocation.
    """
    parts = ["import triton", "import triton.language as tl", ""]
    sources = []
    seen: dict[str, str] = {}  # canonical text -> the first kernel's name
    for k in kernels:
        text, src, reads = _kernel(k, buffers, interpret)
        elide = (local or {}).get(k.name, frozenset()) - reads
        if elide:
            text, src, _ = _kernel(k, buffers, interpret, frozenset(elide))
        key = _canonical(text, k)
        first = seen.setdefault(key, k.name)
        if first != k.name:
            # each Triton function is compiled (per block-size candidate) on its own, and
            # a 12-block model repeats every kernel 12 times: the copies share the first
            parts.append(f"{k.name} = {first}")
            src = dataclasses.replace(src, same_as=first)
        else:
            parts.append(text)
        parts.append("")
        sources.append(src)
    return "\n".join(parts) + "\n", sources
