"""Fusion: groups loop-IR nodes into kernels.

Every kernel has one outer loop (``o`` over ``outer_numel`` rows); each node ("step")
inside it runs its own inner loop over the rest of its dimensions, or none. Pointwise
chains are already single nodes (consumers inline cheap producers at lowering), so the
decisions left here are vertical: may this node run in the same row loop as the nodes
before it? It may when it has the same number of rows and every value it reads from a
buffer produced in the kernel lies in the row the producer has just written.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from .ir import (
    FallbackNode,
    IAdd,
    IDiv,
    IExpr,
    IMod,
    IMul,
    ISym,
    IValue,
    LoweredGraph,
    Op,
    PointwiseNode,
    ReductionNode,
    TensorRef,
    VExpr,
    VIndex,
    VLoad,
    affine,
    index_values,
    may_alias_arguments,
    subexpressions,
)
from .symbolic import Size, expr_symbols, is_static, known_ge, known_lt, same

__all__ = [
    "Kernel",
    "ScheduleItem",
    "Step",
    "fallback_reads",
    "has_indirect_index",
    "is_column_sum",
    "iter_loads",
    "kernel_symbols",
    "reads_within_row",
    "schedule",
]

log = logging.getLogger("strata.inductor_lite")


def _prod(xs: Sequence[Size]) -> Size:
    n: Size = 1
    for x in xs:
        n *= x
    return n


@dataclass(frozen=True)
class Step:
    """One node inside a kernel: its dims ``[:split]`` follow the outer loop."""

    node: PointwiseNode | ReductionNode
    split: int

    @property
    def sizes(self) -> tuple[Size, ...]:
        n = self.node
        return n.sizes if isinstance(n, PointwiseNode) else n.out_sizes + n.red_sizes

    @property
    def var_names(self) -> list[str]:
        n = self.node
        if isinstance(n, PointwiseNode):
            return [f"i{k}" for k in range(len(n.sizes))]
        return [f"i{k}" for k in range(len(n.out_sizes))] + [
            f"r{k}" for k in range(len(n.red_sizes))
        ]

    @property
    def outer_sizes(self) -> tuple[Size, ...]:
        return self.sizes[: self.split]

    @property
    def inner_sizes(self) -> tuple[Size, ...]:
        return self.sizes[self.split :]

    @property
    def inner_numel(self) -> Size:
        return _prod(self.inner_sizes)


@dataclass(frozen=True)
class Kernel:
    name: str
    outer_numel: Size
    steps: tuple[Step, ...]

    @property
    def work(self) -> Size:
        inner = [s.inner_numel for s in self.steps]
        if all(is_static(n) for n in inner):
            return self.outer_numel * max(inner, default=1)  # type: ignore[type-var]
        # symbolic rows: the largest step by its expression (any of them decides the same
        # thing, whether to fork threads)
        return self.outer_numel * next(n for n in inner if not is_static(n))


ScheduleItem = Kernel | FallbackNode


def iter_loads(v: VExpr | PointwiseNode | ReductionNode) -> Iterator[VLoad]:
    """Every load in ``v`` (a value, or a node's body and scatter index), including loads
    inside data-dependent indices."""
    if isinstance(v, PointwiseNode | ReductionNode):
        roots = [v.body]
        if isinstance(v, PointwiseNode) and v.store_index is not None:
            roots += index_values(v.store_index)
        return (ld for root in roots for ld in iter_loads(root))
    return (e for e in subexpressions(v, into_indices=True) if isinstance(e, VLoad))


def kernel_symbols(kernel: Kernel) -> tuple[str, ...]:
    """The size symbols ``kernel``'s loops and indices use, sorted by name."""
    found: set[object] = set()
    for step in kernel.steps:
        node = step.node
        sizes = node.sizes if isinstance(node, PointwiseNode) else node.out_sizes + node.red_sizes
        extra: list[object] = [*sizes, kernel.outer_numel]
        if isinstance(node, PointwiseNode):
            extra += [*node.strides, node.offset]
            if node.store_index is not None:
                found |= _index_symbols(node.store_index)
        found |= expr_symbols(extra)
        found |= _body_symbols(node.body)
    return tuple(sorted(str(s) for s in found))


def _index_symbols(x: IExpr) -> set[object]:
    if isinstance(x, ISym):
        return set(x.expr.free_symbols)
    if isinstance(x, IAdd):
        return set().union(*(_index_symbols(t) for t in x.terms))
    if isinstance(x, IMul | IDiv | IMod):
        return _index_symbols(x.a) | set(expr_symbols([x.c]))
    if isinstance(x, IValue):
        return _body_symbols(x.v) | set(expr_symbols([x.bound]))
    return set()


def _body_symbols(v: VExpr) -> set[object]:
    out: set[object] = set()
    for e in subexpressions(v):
        if isinstance(e, VLoad | VIndex):
            out |= _index_symbols(e.index)
    return out


def _node_symbols(node: PointwiseNode | ReductionNode) -> set[str]:
    """The names of the size symbols a node's loops, layout and body use."""
    found = _body_symbols(node.body)
    if isinstance(node, PointwiseNode):
        extra: list[object] = [*node.sizes, *node.strides, node.offset]
        if node.store_index is not None:
            found |= _index_symbols(node.store_index)
    else:
        extra = [*node.out_sizes, *node.red_sizes]
    return {str(s) for s in expr_symbols(extra) | found}


def has_indirect_index(kernel: Kernel) -> bool:
    """True when some load or index value of ``kernel`` is indexed by a value read from a
    tensor (the wrapper then checks the kernel's out-of-range flag)."""
    for s in kernel.steps:
        node = s.node
        if isinstance(node, PointwiseNode) and node.store_index is not None:
            return True
        for e in subexpressions(node.body, into_indices=True):
            if isinstance(e, VLoad | VIndex) and index_values(e.index):
                return True
    return False


def _default_step(node: PointwiseNode | ReductionNode) -> Step:
    if isinstance(node, ReductionNode):
        return Step(node, len(node.out_sizes))
    return Step(node, max(len(node.sizes) - 1, 0))


def _step_for_rows(node: PointwiseNode | ReductionNode, rows: Size) -> Step | None:
    if isinstance(node, ReductionNode):
        step = Step(node, len(node.out_sizes))
        return step if same(_prod(node.out_sizes), rows) else None
    sizes = node.sizes
    # prefer the split with the smallest inner loop that still matches the row count
    for k in range(len(sizes), -1, -1):
        if same(_prod(sizes[:k]), rows):
            return Step(node, k)
    return None


def reads_within_row(reader: Step, producer: Step, load: VLoad) -> bool:
    """True when ``load`` (in ``reader``) only touches the producer's current row."""
    pnode = producer.node
    if isinstance(pnode, PointwiseNode) and not pnode.full_store:
        return False
    row = producer.inner_numel if isinstance(pnode, PointwiseNode) else 1
    form = affine(load.index)
    if form is None:
        return False
    coefs, const = form
    names = reader.var_names
    sizes = reader.sizes
    outer_stride: Size = 1
    for k in range(reader.split - 1, -1, -1):
        if sizes[k] != 1 and not same(coefs.get(names[k], 0), outer_stride * row):
            return False
        outer_stride *= sizes[k]
    lo = hi = const
    for k in range(reader.split, len(sizes)):
        span = coefs.get(names[k], 0) * (sizes[k] - 1)
        # a symbolic span counts only with a provable sign (else: not within the row)
        if known_ge(span, 0):
            hi += span
        elif known_ge(0, span):
            lo += span
        else:
            return False
    return known_ge(lo, 0) and known_lt(hi, row)


@dataclass
class _OpenKernel:
    rows: Size
    steps: list[Step]
    produced: dict[str, Step]


# A node of more elements than this does not join a kernel whose single row would make it
# one flat inner loop (each index recovered by division and remainder, no vectorisation).
_FLAT_JOIN_LIMIT = 4096


# At most this many elements (written, or read by a reduction) for a node to count as small.
_SMALL_NODE = 65536


# Above this many elements a node reading only graph inputs (a convolution weight's
# channels-last copy) is not moved to the front: densenet121's 58 copies of 32x128x3x3
# weights, all up front, wrote 8.5 MB before the first convolution, which then read its
# weight back from memory (its 3x3 convolutions on 6x6 took 64 us instead of 46); each
# copy at its own place is still in cache when its convolution runs.
_HOIST_LIMIT = 16384


def _stays_in_place(node: PointwiseNode | ReductionNode, deps: Sequence[int]) -> bool:
    n = _prod(node.sizes if isinstance(node, PointwiseNode) else node.out_sizes)
    return not deps and is_static(n) and int(n) > _HOIST_LIMIT


def _is_small(node: PointwiseNode | ReductionNode) -> bool:
    sizes = node.sizes if isinstance(node, PointwiseNode) else node.out_sizes + node.red_sizes
    n = _prod(sizes)
    return is_static(n) and int(n) <= _SMALL_NODE


def _stores_little(node: PointwiseNode | ReductionNode) -> bool:
    """Whether the node's own result is small (a reduction over a large input may be)."""
    n = _prod(node.sizes if isinstance(node, PointwiseNode) else node.out_sizes)
    return is_static(n) and int(n) <= _SMALL_NODE


def _reads_from(group: _OpenKernel, node: PointwiseNode | ReductionNode) -> bool:
    return any(load.buf in group.produced for load in iter_loads(node))


def _try_join(group: _OpenKernel, node: PointwiseNode | ReductionNode) -> Step | None:
    step = _step_for_rows(node, group.rows)
    if step is None:
        return None
    if is_column_sum(node):
        # a column sum starts its kernel, where the C++ generator interchanges its loops, or
        # joins one of column sums only (each its own loop nest): a backward's layer-norm
        # weight and bias gradients and the bias gradient of the linear beside them in one
        # launch, where there were three
        joins = all(is_column_sum(s.node) for s in group.steps) and not _reads_from(group, node)
        return step if joins and same(group.steps[0].inner_numel, step.inner_numel) else None
    if (
        step.split == 0
        and _default_step(node).split > 0
        and is_static(step.inner_numel)
        and int(step.inner_numel) > _FLAT_JOIN_LIMIT
    ):
        # a per-channel vector (one row) followed by a whole activation: fused, the
        # activation's channels-last copy took 3x as long as alone
        return None
    for load in iter_loads(node):
        producer = group.produced.get(load.buf)
        if producer is not None and not reads_within_row(step, producer, load):
            return None
    return step


def fallback_reads(node: FallbackNode) -> set[str]:
    """The buffers an aten call reads (its tensor arguments, nested in lists too)."""
    names: set[str] = set()

    def walk(a: object) -> None:
        if isinstance(a, TensorRef):
            names.add(a.buf)
        elif isinstance(a, list | tuple):
            for x in a:
                walk(x)

    walk(node.args)
    walk([v for _, v in node.kwargs])
    return names


def _item_reads(item: _OpenKernel | FallbackNode) -> set[str]:
    if isinstance(item, FallbackNode):
        return fallback_reads(item)
    return {ld.buf for s in item.steps for ld in iter_loads(s.node)}


class _LastReads:
    """Per graph node, the intermediate buffers it is the last reader of (in program order),
    with their bytes: a node that joins an earlier kernel frees those there."""

    def __init__(self, graph: LoweredGraph) -> None:
        kept = (
            {o.ref.buf for o in graph.outputs if o.ref is not None}
            | {g.buf for g in graph.guards}
            | {w.value.buf for w in graph.input_writes}
            | {s.name for s in graph.inputs}
            | set(graph.constants)
        )
        last: dict[str, int] = {}
        for i, node in enumerate(graph.nodes):
            if isinstance(node, FallbackNode):
                reads = fallback_reads(node)
                if may_alias_arguments(node.target):
                    kept |= reads  # a view's base lives as long as the view
            else:
                reads = {ld.buf for ld in iter_loads(node)}
            for name in reads:
                last[name] = i
        self.by_node: dict[int, list[str]] = {}
        for name, i in last.items():
            if name not in kept and name in graph.buffers:
                self.by_node.setdefault(i, []).append(name)
        self.buffers = graph.buffers
        self._for = -1
        self._last_item: dict[str, int] = {}

    def nbytes(self, name: str) -> int | None:
        spec = self.buffers.get(name)
        if spec is None or not is_static(spec.numel):
            return None
        return int(spec.numel) * spec.dtype.itemsize

    def frees_as_much(
        self,
        i: int,
        node: PointwiseNode | ReductionNode,
        items: list[_OpenKernel | FallbackNode],
        k: int,
    ) -> bool:
        """Whether node ``i`` placed in item ``k`` would end buffers of at least its own
        size there: it is their last reader and no item after ``k`` reads them."""
        names = self.by_node.get(i)
        written = self.nbytes(node.buf)
        if not names or written is None:
            return False
        if self._for != i:
            # the last item reading each buffer, found once per node (items only grow
            # behind the node being placed while it is placed)
            self._for, self._last_item = i, {}
            for idx, item in enumerate(items):
                for name in _item_reads(item).intersection(names):
                    self._last_item[name] = idx
        freed = 0
        for name in names:
            size = self.nbytes(name)
            if size is not None and self._last_item.get(name, -1) <= k:
                freed += size
        return freed >= written


def schedule(graph: LoweredGraph) -> list[ScheduleItem]:
    """Group the graph's nodes into kernels and fallback calls.

    A node joins the earliest kernel that comes after everything it reads and whose row
    loop it fits; otherwise it starts a new kernel at the end, or, for a small node, right
    after the last item it reads. Moving a node earlier is safe because its readers all
    come later in program order.
    """
    items: list[_OpenKernel | FallbackNode] = []
    writer: dict[str, int] = {}  # buffer -> index of the item producing it
    # data-dependent size symbol -> index of the aten call binding it (runtime_values.py)
    binder: dict[str, int] = {}
    last_call = -1  # index of the last aten call in items
    last_reads = _LastReads(graph)
    for i, node in enumerate(graph.nodes):
        if isinstance(node, FallbackNode):
            last_call = len(items)
            items.append(node)
            for spec in node.outputs:
                if spec is not None:
                    writer[spec.name] = len(items) - 1
            binder.update((name, len(items) - 1) for name, _ in node.binds)
            continue
        deps = [writer[ld.buf] for ld in iter_loads(node) if ld.buf in writer]
        if binder:
            deps += [binder[s] for s in _node_symbols(node) if s in binder]
        if node.buf in writer:
            # a second writer of one buffer (cat) stays after the first; a scatter adding
            # into it, after the first's whole item (its index may name any row)
            accumulates = isinstance(node, PointwiseNode) and node.accumulate
            deps.append(writer[node.buf] + int(accumulates))
        first = max(deps, default=0)
        placed = -1
        step: Step | None = None
        big = not _stores_little(node) or _stays_in_place(node, deps)
        for k in range(first, len(items)):
            item = items[k]
            if isinstance(item, _OpenKernel):
                if (
                    big
                    and k < last_call
                    and not _reads_from(item, node)
                    and not last_reads.frees_as_much(i, node, items, k)
                ):
                    # a large value that reads nothing of that kernel would be computed before
                    # an aten call that does not need it and held across it (a backward that
                    # recomputed every layer norm's output up front peaked 4 MiB higher);
                    # unless it is the last reader of as many bytes, which then die there
                    # (attention's copy of v frees the qkv projection before the first bmm)
                    continue
                step = _try_join(item, node)
                if step is not None:
                    item.steps.append(step)
                    placed = k
                    break
        if step is None:
            step = _default_step(node)
            placed = len(items)
            if _is_small(node) and node.buf not in writer and not _stays_in_place(node, deps):
                # a small node (weights, per-channel vectors) goes right after what it reads,
                # not after the aten calls between: in front of a graph's convolutions its
                # kernels run together, where other small nodes can join them
                placed = first + 1 if deps else 0
                if placed < len(items):
                    writer = {b: (k + 1 if k >= placed else k) for b, k in writer.items()}
                    binder = {b: (k + 1 if k >= placed else k) for b, k in binder.items()}
                    if placed <= last_call:
                        last_call += 1
            items.insert(placed, _OpenKernel(_prod(step.outer_sizes), [step], {}))
        group = items[placed]
        assert isinstance(group, _OpenKernel)
        if node.buf in group.produced or node.buf in writer:
            # several writers to one buffer: readers in this kernel cannot rely on rows
            group.produced[node.buf] = Step(PointwiseNode(node.buf, (), node.body, (), 0, False), 0)
        else:
            group.produced[node.buf] = step
        writer[node.buf] = placed
    out: list[ScheduleItem] = []
    count = 0
    for item in items:
        if isinstance(item, _OpenKernel):
            out.append(Kernel(f"kernel{count}", item.rows, tuple(item.steps)))
            count += 1
        else:
            out.append(item)
    log.debug("scheduled %d kernels", count)
    return out


# -- column sums (column_sum.py generates their code) ----------------------------------------

# fewer outputs than a vector's lanes: the row kernel's vectorised reduction loop is better
_MIN_OUTPUTS = 8


def _innermost(prefix: str, sizes: tuple[Size, ...]) -> str | None:
    """The name of the last dimension of more than one element (``Step.var_names``)."""
    for k in range(len(sizes) - 1, -1, -1):
        if sizes[k] != 1:
            return f"{prefix}{k}"
    return None


def is_column_sum(node: PointwiseNode | ReductionNode) -> bool:
    """``node`` is a static float sum whose loads are contiguous along its outputs and
    strided along its reduction: computed column-wise when it starts its kernel."""
    if not isinstance(node, ReductionNode) or node.reduction is not Op.SUM:
        return False
    if node.dtype not in (torch.float32, torch.float64):
        return False
    if not all(is_static(s) for s in (*node.out_sizes, *node.red_sizes)):
        return False
    if math.prod(int(s) for s in node.out_sizes) < _MIN_OUTPUTS:  # type: ignore[call-overload]
        return False
    out_var = _innermost("i", node.out_sizes)
    red_var = _innermost("r", node.red_sizes)
    if out_var is None or red_var is None:
        return False
    strided = False
    for ld in subexpressions(node.body, into_indices=True):
        if not isinstance(ld, VLoad):
            continue
        form = affine(ld.index)
        if form is None or index_values(ld.index):
            return False
        coefs = form[0]
        along_out = coefs.get(out_var, 0)
        if along_out not in (0, 1):
            return False
        if along_out == 1 and coefs.get(red_var, 0) not in (0, 1):
            strided = True
    return strided
