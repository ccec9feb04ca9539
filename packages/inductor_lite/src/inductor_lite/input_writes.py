"""Which new values of graph inputs a kernel may store straight into the input's memory.

aot hands us inference graphs that end with ``copy_(input, new_value)`` (an optimizer step:
``p.sub_(lr * p.grad)`` becomes ``copy_(p, p - lr * g)``). Lowered, the new value is a
buffer that some kernel stores. Writing that buffer in the input's memory instead of a
fresh one turns "compute into a new buffer, then copy it back" into one pass that reads
``p`` and ``g`` and writes ``p``, with no allocation. That is only sound when nothing can
see the difference:

* the value's buffer has exactly the input's dtype, sizes, strides and element count, and
  the input's layout is dense (no two elements share an address);
* the kernel step storing it is a pointwise step that reads the input (if at all) only at
  the very address it stores to, so each element is read before it is overwritten, and no
  other step of that kernel reads the input;
* no later kernel or aten call reads the input's old value, no aten call returning an alias
  (a view) ever reads it, and it is not a graph output; nor is the value's buffer;
* at run time, the input's memory overlaps no other tensor input's (checked on every call
  by the wrapper, which otherwise runs the variant that copies at the end).
"""

from __future__ import annotations

from collections.abc import Sequence

from .ir import BufferSpec, FallbackNode, LoweredGraph, PointwiseNode, affine, may_alias_arguments
from .node_facts import is_dense as _is_dense
from .scheduler import Kernel, ScheduleItem, iter_loads
from .symbolic import Size, same

__all__ = ["in_place_writes", "memory_extent"]


def memory_extent(spec: BufferSpec) -> Size:
    """Bytes from a tensor's first element to just past its last (0 when it is empty)."""
    span: Size = 1
    for size, stride in zip(spec.sizes, spec.strides, strict=True):
        if isinstance(size, int) and size == 0:
            return 0
        span = span + (size - 1) * stride  # torch strides are never negative
    return span * spec.dtype.itemsize


def _same_geometry(a: Sequence[Size], b: Sequence[Size]) -> bool:
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))


def _loads_only_at_store(node: PointwiseNode, buf: str, writer: PointwiseNode) -> bool:
    """Every load of ``buf`` in ``node`` reads the element ``writer`` stores at that index.

    (``node`` and ``writer`` have the same sizes: the same index names the same element.)
    """
    names = [f"i{k}" for k in range(len(node.sizes))]
    store = {
        v: st
        for v, size, st in zip(names, writer.sizes, writer.strides, strict=True)
        if size != 1 and not same(st, 0)
    }
    for ld in iter_loads(node):
        if ld.buf != buf:
            continue
        form = affine(ld.index)
        if form is None or not set(form[0]) <= set(names):
            return False
        coefs = {
            v: c for v, c in form[0].items() if not same(c, 0) and node.sizes[names.index(v)] != 1
        }
        if set(coefs) != set(store) or not all(same(coefs[v], store[v]) for v in store):
            return False
        if not same(form[1], writer.offset):
            return False
    return True


def _reads(item: ScheduleItem) -> set[str]:
    if isinstance(item, Kernel):
        return {ld.buf for s in item.steps for ld in iter_loads(s.node)}
    names: set[str] = set()
    stack: list[object] = [*item.args, *(v for _, v in item.kwargs)]
    while stack:
        a = stack.pop()
        if isinstance(a, list | tuple):
            stack.extend(a)
        elif hasattr(a, "buf"):
            names.add(a.buf)  # type: ignore[attr-defined]
    return names


def _kernel_reads_before_store(kernel: Kernel, j: int, buf: str) -> bool:
    """Does every read of ``buf`` in ``kernel`` happen before step ``j`` overwrites it?

    Steps run one after the other for each row of the kernel. A step reading ``buf`` is
    fine when it is step ``j`` itself or comes before it, is pointwise over the same sizes and
    rows, and reads only the element step ``j`` stores at the same index: within a row it
    then reads every element before it is overwritten, and no row touches another's
    elements. (Momentum SGD: the step storing the new momentum buffer and the parameter's
    step, which recomputes it from the old buffer, fuse into one kernel.)
    """
    writer_step = kernel.steps[j]
    writer = writer_step.node
    if not isinstance(writer, PointwiseNode):
        return False
    for n, step in enumerate(kernel.steps):
        node = step.node
        if not any(ld.buf == buf for ld in iter_loads(node)):
            continue
        if n > j or not isinstance(node, PointwiseNode):
            return False
        if n < j and (
            step.split != writer_step.split or not _same_geometry(node.sizes, writer.sizes)
        ):
            return False
        if not _loads_only_at_store(node, buf, writer):
            return False
    return True


def in_place_writes(graph: LoweredGraph, items: Sequence[ScheduleItem]) -> dict[str, str]:
    """``{value buffer: input}`` for the input writes whose kernel may store into the input."""
    if graph.guards:
        # results checked after the kernels ran, the graph rerun as it came when a check
        # fails (conv_fold.py): that rerun must find the inputs untouched
        return {}
    buffers = graph.buffers
    returned = {o.ref.buf for o in graph.outputs if o.ref is not None}
    aliased: set[str] = set()  # read by an aten call whose result may alias its arguments
    for item in items:
        if isinstance(item, FallbackNode) and may_alias_arguments(item.target):
            aliased |= _reads(item)
    writer: dict[str, tuple[int, int]] = {}  # buffer -> (item, step) storing it
    stored_twice: set[str] = set()
    for k, item in enumerate(items):
        if isinstance(item, Kernel):
            for j, step in enumerate(item.steps):
                if step.node.buf in writer:
                    stored_twice.add(step.node.buf)
                writer[step.node.buf] = (k, j)
        else:
            for spec in item.outputs:
                if spec is not None:
                    stored_twice.add(spec.name)  # an aten result: no kernel to redirect
    chosen: dict[str, str] = {}
    for w in graph.input_writes:
        dst = buffers[w.input]
        ref = w.value
        buf = ref.buf
        if buf in chosen or buf not in writer or buf in stored_twice:
            continue
        if w.input in aliased or w.input in returned or buf in returned:
            continue
        if not (
            ref.dtype == dst.dtype
            and _same_geometry(ref.sizes, dst.sizes)
            and _same_geometry(ref.strides, dst.strides)
            and same(ref.offset, 0)
            and same(buffers[buf].numel, dst.numel)
            and _is_dense(dst.sizes, dst.strides)
        ):
            continue
        k, j = writer[buf]
        kernel = items[k]
        assert isinstance(kernel, Kernel)
        if not _kernel_reads_before_store(kernel, j, w.input):
            continue
        if any(w.input in _reads(later) for later in items[k + 1 :]):
            continue
        chosen[buf] = w.input
    return chosen
