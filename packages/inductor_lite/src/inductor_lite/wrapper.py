"""The generated Python wrapper: allocates buffers, calls kernels and aten, returns outputs."""

from __future__ import annotations

import builtins
import ctypes
import dis
import os
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import sympy
import torch
from torch.utils._sympy.symbol import SymT, symbol_is_type

from .cpp import KernelSource
from .errors import UnsupportedGraph
from .fast_alloc import fast_alloc_module
from .input_writes import memory_extent
from .ir import (
    BufferSpec,
    FallbackNode,
    LoweredGraph,
    PointwiseNode,
    ReductionNode,
    VLoad,
    affine,
    contiguous_strides,
    may_alias_arguments,
)
from .kept_buffers import KeptBuffers, guarded_source
from .kernel_call import fast_kernel
from .origins import comment_lines, item_buffers
from .scheduler import (
    Kernel,
    ScheduleItem,
    Step,
    fallback_reads,
    has_indirect_index,
    iter_loads,
    kernel_symbols,
    reads_within_row,
)
from .symbolic import Size, pyexpr, pysizes
from .wrapper_args import arg_expr as _arg_expr
from .wrapper_args import as_view as _as_view
from .wrapper_args import ref_expr as _ref_expr
from .wrapper_args import restride as _restride

__all__ = ["build_input_check", "build_wrapper", "ctypes_kernels", "kernel_local_buffers"]


_WRAPPER_FILENAME = os.path.join(os.path.dirname(os.path.abspath(__file__)), "<generated wrapper>")


def _reads(item: ScheduleItem) -> set[str]:
    if isinstance(item, Kernel):
        return {ld.buf for s in item.steps for ld in iter_loads(s.node)} | {
            s.node.buf for s in item.steps
        }
    return fallback_reads(item)


def kernel_local_buffers(
    graph: LoweredGraph, items: Sequence[ScheduleItem]
) -> dict[str, frozenset[str]]:
    """Per kernel, the buffers it writes that no other item reads and the graph does not
    return, check or copy into an input: only the kernel itself may need their values."""
    results = (
        {o.ref.buf for o in graph.outputs if o.ref is not None}
        | {g.buf for g in graph.guards}
        | {w.value.buf for w in graph.input_writes}
        | {s.name for s in graph.inputs}
    )
    readers: dict[str, set[int]] = {}
    for k, item in enumerate(items):
        for name in _reads(item):
            readers.setdefault(name, set()).add(k)
    out: dict[str, frozenset[str]] = {}
    for k, item in enumerate(items):
        if isinstance(item, Kernel):
            written = {s.node.buf for s in item.steps}
            out[item.name] = frozenset(
                b for b in written if b not in results and readers.get(b, {k}) <= {k}
            )
    return out


def ctypes_kernels(
    lib: ctypes.CDLL, sources: Sequence[KernelSource], fast: ModuleType | None = None
) -> dict[str, tuple[Callable[..., None], tuple[str, ...]]]:
    """The compiled C++ kernels as callables of data pointers: through ``fast``
    (kernel_call.kernel_call_module) where given, else ctypes."""
    out: dict[str, tuple[Callable[..., None], tuple[str, ...]]] = {}
    for src in sources:
        fn = getattr(lib, src.name)
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p] * len(src.params) + [ctypes.c_int64] * len(src.symbols)
        out[src.name] = (fast_kernel(fn, len(fn.argtypes), fast), src.params)
    return out


def build_wrapper(
    graph: LoweredGraph,
    items: Sequence[ScheduleItem],
    kernels: dict[str, tuple[Callable[..., None], tuple[str, ...]]],
    *,
    pass_pointers: bool,
    index_check: Callable[[], int] | None = None,
    in_place: dict[str, str] | None = None,
    safe: Callable[[Sequence[Any]], tuple[object, ...]] | None = None,
    boxed: bool = False,
    kept_bytes: int = 0,
) -> tuple[Callable[[Sequence[Any]], tuple[object, ...]], str]:
    """The callable running the schedule, and its Python source (for logs and tests).

    ``boxed``: the callable takes a list that it empties once it has read its inputs, and drops
    each input at its last use, so that the caller's tensors (a backward's saved activations)
    can be freed during the call. Not for a graph with guards (its fallback reruns the inputs).

    Kernels get data pointers (C++) or the tensors themselves (Triton launchers). The graph's
    input writes are copied into the inputs at the end, except those of ``in_place``
    (``{value buffer: input}``, from ``input_writes.in_place_writes``), whose kernels store
    into the input's memory: then ``safe`` (this schedule built without ``in_place``) runs
    instead on a call where such an input overlaps another tensor input in memory.

    ``kept_bytes`` (C++ on CPU): up to this many bytes of intermediate buffers with static
    sizes that never reach the caller are allocated once and kept between calls
    (kept_buffers.py).
    """
    in_place = in_place or {}
    if in_place and safe is None:
        raise ValueError("in-place input writes need the copying wrapper as a fallback")
    buffers = graph.buffers
    # CPU: buffers and views made in C++, without the dispatcher (fast_alloc.py)
    fast = fast_alloc_module() if graph.device.type == "cpu" else None
    ns: dict[str, object] = {
        "torch": torch,
        "_as_view": fast.view if fast is not None else _as_view,
        "_restride": _restride,
        "_empty": fast.empty if fast is not None else torch.empty_strided,
        "_dev": graph.device,
        "_index_error": index_check,
        "_safe": safe,
        "_overlapping": _written_range_overlaps,
        "_bump": torch.autograd.graph.increment_version,
    }
    ns.update(graph.constants)
    consts: list[object] = []
    external = (
        {s.name for s in graph.inputs} | set(graph.constants) | set(graph.float_inputs.values())
    )
    # a guard's buffer, and a new value copied into its input at the end, are read at the
    # end like an output: never reused before that
    output_bufs = (
        {o.ref.buf for o in graph.outputs if o.ref is not None}
        | {g.buf for g in graph.guards}
        | {w.value.buf for w in graph.input_writes}
    )
    last_use: dict[str, int] = {}
    for k, item in enumerate(items):
        for name in _reads(item):
            last_use[name] = k
    pool: dict[tuple[object, ...], list[str]] = {}
    allocated: set[str] = set()
    # only buffers this wrapper allocated may be reused, and never one an aten result aliases
    owned: set[str] = set()
    pinned: set[str] = set()
    for item in items:
        if isinstance(item, FallbackNode) and may_alias_arguments(item.target):
            pinned |= _reads(item)
    kept = KeptBuffers(
        ns, graph.device, external | output_bufs | pinned, limit=kept_bytes if pass_pointers else 0
    )
    lines = ["def call(args):"]
    names = ", ".join(s.name for s in graph.inputs)
    if graph.inputs:
        lines.append(f"    {names}{',' if len(graph.inputs) == 1 else ''} = args")
    lines += _bind_symbols(graph)
    for k, buf in graph.float_inputs.items():
        lines.append(
            f"    {buf} = torch.tensor({graph.inputs[k].name}, dtype=torch.float64, device=_dev)"
        )
    lines += _overlap_check(graph, set(in_place.values()))
    boxed = boxed and not graph.guards
    # inputs the call may let go of before it returns (boxed calls only)
    droppable: set[str] = set()
    if boxed:
        written = {w.input for w in graph.input_writes} | set(in_place.values())
        droppable = {s.name for s in graph.inputs} - output_bufs - written
        lines.append("    args.clear()  # the caller's references go: inputs die at last use")
        unread = sorted(n for n in droppable if n not in last_use)
        if unread:
            lines.append(f"    del {', '.join(unread)}")
    for buf, inp in in_place.items():
        # the kernel storing this value writes the input's memory (input_writes.py)
        lines.append(f"    {buf} = {_reuse(buffers[inp], buffers[buf])}  # into the input")
        allocated.add(buf)

    def take(free: list[str], spec: BufferSpec) -> str:
        """The expression giving ``spec`` a pooled dead buffer's memory; the dead buffer's name
        is dropped once the new one holds it (it would keep the memory after the new buffer's
        own last use)."""
        old = free.pop()
        if old != spec.name:
            drops.append(old)
        return _reuse(buffers[old], spec)

    def allocate(spec: BufferSpec) -> None:
        if spec.name in allocated or spec.name in external:
            return
        allocated.add(spec.name)
        owned.add(spec.name)
        if kept.eligible(spec):
            free = kept.pool.get(_pool_key(spec))
            if free or kept.fits(spec):
                old = free.pop() if free else None
                if old is not None and old != spec.name:
                    drops.append(old)
                lines.append(f"    {spec.name} = {kept.keep(spec, old)}  # kept between calls")
                return
        free = pool.get(_pool_key(spec))
        if free:
            lines.append(f"    {spec.name} = {take(free, spec)}  # reuse")
        else:
            dtype = str(spec.dtype).split(".")[-1]
            shape = f"{pysizes(spec.sizes)}, {pysizes(spec.strides)}"
            how = f"torch.{dtype}" if fast is not None else f"dtype=torch.{dtype}, device=_dev"
            lines.append(f"    {spec.name} = _empty({shape}, {how})")

    def reusable(name: str) -> bool:
        return name in owned and name not in pinned and name not in output_bufs

    # names the call no longer needs: dropping them frees their memory at their last use
    # rather than at the end of the call (CUDA's caching allocator hands it to the next
    # allocation; on CPU the pool above keeps reusable ones instead)
    drops: list[str] = []
    pooling = pass_pointers
    # Triton: kernel-local values (kept in registers, never stored) cannot take memory over
    rows_local = (
        None if pass_pointers else frozenset().union(*kernel_local_buffers(graph, items).values())
    )
    internal = set(buffers) - external - output_bufs

    for k, item in enumerate(items):
        lines += comment_lines(graph.origins, item_buffers(item), "    # ")  # source lines
        if isinstance(item, Kernel):
            fn, params = kernels[item.name]
            # Triton's autotuner launches a kernel several times on the same buffers, but puts
            # back what the kernel stores first (triton_runtime.TritonLauncher._tune), so an
            # in-place kernel is applied once there too
            pair = next(
                (
                    (out, src)
                    for out, src in _in_place(item, buffers, rows=rows_local)
                    if out not in allocated
                    and reusable(src)
                    and last_use.get(src) == k
                    # a kept buffer's memory goes only to a buffer that may be kept
                    and (src not in kept.tensors or kept.eligible(buffers[out]))
                ),
                None,
            )
            if pair is not None and pair[1] in kept.tensors:
                out, src = pair
                lines.append(f"    {out} = {kept.keep(buffers[out], src)}  # in place")
                allocated.add(out)
                owned.add(out)
                owned.discard(src)
            elif pair is not None:
                out, src = pair
                # the kernel reads each element of src just before writing it, at the same
                # address: write into src's memory instead of a fresh buffer (a new buffer
                # per call page-faulted ~900 times per CNN call); src is never pooled now
                lines.append(f"    {out} = {_reuse(buffers[src], buffers[out])}  # in place")
                allocated.add(out)
                owned.add(out)
                owned.discard(src)
            for name in params:
                allocate(buffers[name])
            ns[f"_{item.name}"] = fn
            if pass_pointers:
                ptrs = ", ".join(kept.ptr(n) for n in params)
            else:
                ptrs = ", ".join(params)
            symbols = kernel_symbols(item)
            if symbols:
                ptrs = ", ".join([ptrs, *symbols])
            lines.append(f"    _{item.name}({ptrs})")
            if index_check is not None and has_indirect_index(item):
                lines.append("    if _index_error():")
                lines.append(
                    "        raise IndexError('index out of range in embedding, gather, "
                    "index_select or scatter')"
                )
        else:
            out_buf = None
            spec0 = item.outputs[0]
            if (
                item.target in _OUT_VARIANTS
                and spec0 is not None
                and spec0.strides == contiguous_strides(spec0.sizes)
            ):
                # a dead buffer of the result's layout takes the GEMM's result: a fresh
                # 4 MB result page-faulted ~1000 times per call at the end of a GPT; one
                # that never reaches the caller may be kept between calls
                free = pool.get(_pool_key(spec0))
                kept_free = kept.pool.get(_pool_key(spec0)) if kept.eligible(spec0) else None
                if kept_free or (kept.fits(spec0) and not free):
                    old = kept_free.pop() if kept_free else None
                    if old is not None:
                        drops.append(old)
                    out_buf = kept.keep(spec0, old)
                elif free:
                    out_buf = take(free, spec0)
            lines.extend(_fallback_lines(k, item, buffers, consts, ns, out_buf, kept))
            fresh = [s.name for s in item.outputs if s is not None]
            allocated.update(fresh)
            drops.extend(n for n in fresh if n not in last_use and n in internal)
            if not may_alias_arguments(item.target):
                owned.update(fresh)  # a new tensor from aten: ours to reuse once it is dead
        for name in sorted(_reads(item)):
            if last_use.get(name) != k:
                continue
            if pooling and reusable(name):
                spec = buffers[name]
                free_list = kept.pool if name in kept.tensors else pool
                free_list.setdefault(_pool_key(spec), []).append(name)
            elif (name in internal and name in allocated) or name in droppable:
                drops.append(name)
        if drops:
            lines.append(f"    del {', '.join(drops)}")
            drops.clear()
    outs = []
    for o in graph.outputs:
        if o.ref is None and isinstance(o.constant, sympy.Expr):
            outs.append(f"bool({pyexpr(o.constant)})" if o.boolean else pyexpr(o.constant))
        elif o.ref is None:
            consts.append(o.constant)
            outs.append(f"_c{len(consts) - 1}")
        else:
            outs.append(_ref_expr(o.ref, buffers))
    if graph.guards:
        # folded convolutions (conv_fold.py) whose results are not provably eager's
        assert graph.unguarded is not None
        ns["_unguarded"] = graph.unguarded
        checks = " and ".join(f"{_ref_expr(g, buffers)}.item()" for g in graph.guards)
        lines.append(f"    if not ({checks}):")
        lines.append("        return _unguarded(args)")
    for w in graph.input_writes:
        if in_place.get(w.value.buf) == w.input:
            lines.append(f"    _bump({w.input})  # as eager's in-place op does")
        else:
            lines.append(f"    {w.input}.copy_({_ref_expr(w.value, buffers)})")
    lines.append(f"    return ({', '.join(outs)}{',' if len(outs) == 1 else ''})")
    for i, c in enumerate(consts):
        ns[f"_c{i}"] = c
    if kept.tensors:
        plain, _ = build_wrapper(
            graph, items, kernels, pass_pointers=pass_pointers, index_check=index_check,
            in_place=in_place, safe=safe, boxed=boxed,
        )  # fmt: skip
        lines = guarded_source(lines, ns, plain)
    source = "\n".join(lines) + "\n"
    # named as a file of this package so that frame hooks treat it as library code (a
    # torch.compile-like frontend must not try to compile the wrapper it is calling)
    exec(compile(source, _WRAPPER_FILENAME, "exec"), ns)
    call = ns["call"]
    assert callable(call)
    _check_bound(call, ns)
    return call, source


def _in_place(
    item: Kernel, buffers: dict[str, BufferSpec], *, rows: frozenset[str] | None = None
) -> list[tuple[str, str]]:
    """Every (output, input) such that ``item`` may write its output over the input's memory.

    That is a one-step pointwise kernel whose every load of the input is at the very address
    it stores to (an elementwise epilogue such as batch norm + ReLU after a convolution), the
    input having the output's dtype and static sizes. The kernel then reads an element and
    writes it back in one iteration, so no iteration sees another's result (the generated
    code's restrict qualifiers are not relied on across iterations).

    ``rows`` (Triton: the kernel-local buffers, which are never stored): also a pointwise
    step of a longer kernel (softmax's normalising step after its max and sum), see
    ``_in_place_rows``.
    """
    if len(item.steps) != 1 or not isinstance(item.steps[0].node, PointwiseNode):
        return [] if rows is None else _in_place_rows(item, buffers, rows)
    return _same_address_inputs(item.steps[0].node, buffers, set())


def _in_place_rows(
    item: Kernel, buffers: dict[str, BufferSpec], local: frozenset[str]
) -> list[tuple[str, str]]:
    """(output, input) pairs of a multi-step Triton kernel whose pointwise step ``s`` may
    store over the input: ``s`` loads the input only at the address it stores to, no later
    step loads it, and every earlier step that loads it is a reduction over the current row
    of ``s``'s contiguous output whose result ``s`` depends on (through the kernel's own
    values). A store of row ``o`` then waits, by data dependence, for each of those
    reductions of row ``o``, hence for all their loads of that row; programs own disjoint
    rows. (Attention's softmax writing its probabilities over the scores: 2 MiB less at
    the peak of a transformer block.)"""
    found: list[tuple[str, str]] = []
    steps = item.steps
    for p, step in enumerate(steps):
        node = step.node
        if not isinstance(node, PointwiseNode) or not node.full_store or node.buf in local:
            continue
        if node.strides != contiguous_strides(node.sizes) or node.offset != 0:
            continue
        # the kernel's values step p depends on, directly or through earlier steps
        produced = {s.node.buf: s for s in steps[:p]}
        needed: set[str] = set()
        stack = [ld.buf for ld in iter_loads(node) if ld.buf in produced]
        while stack:
            b = stack.pop()
            if b not in needed:
                needed.add(b)
                stack.extend(ld.buf for ld in iter_loads(produced[b].node) if ld.buf in produced)
        own = {ld.buf for ld in iter_loads(node)}
        same = {b for _, b in _same_address_inputs(node, buffers, set(produced))}
        out = node.buf
        spec = buffers[out]
        candidates = {ld.buf for s in steps[:p] for ld in iter_loads(s.node)} | own
        for src in sorted(candidates - set(produced) - {out}):
            if buffers[src].dtype != spec.dtype or buffers[src].numel != spec.numel:
                continue
            later = any(ld.buf == src for s in steps[p + 1 :] for ld in iter_loads(s.node))
            if (
                later
                or (src in own and src not in same)
                or any(
                    ld.buf == src and not _read_before_store(s, step, ld, needed, src, buffers)
                    for s in steps[:p]
                    for ld in iter_loads(s.node)
                )
            ):
                continue
            found.append((out, src))
    return found


def _read_before_store(  # noqa: PLR0917
    s: Step,
    store: Step,
    load: VLoad,
    needed: set[str],
    src: str,
    buffers: dict[str, BufferSpec],
) -> bool:
    """Whether every element ``load`` (in the earlier step ``s``) reads of ``src`` is read
    before ``store`` can write it: ``s`` is a reduction over ``store``'s current row that
    ``store`` depends on, or a pointwise step over ``store``'s elements, reading ``src`` at
    the address it stores to, whose value ``store`` reads at the address it stores to."""
    if s.node.buf not in needed:
        return False
    if isinstance(s.node, ReductionNode):
        return reads_within_row(s, store, load)
    node, pnode = s.node, store.node
    assert isinstance(pnode, PointwiseNode)
    # addresses, not indices: ``store`` writes address a of src's memory from ``s``'s value
    # at address a, which ``s`` computed from src's element at address a
    if buffers[node.buf].numel != buffers[pnode.buf].numel:
        return False
    if src not in {b for _, b in _same_address_inputs(node, buffers, set())}:
        return False
    same = {b for _, b in _same_address_inputs(pnode, buffers, set(), loose=True)}
    return node.buf in same


def _same_address_inputs(
    node: PointwiseNode, buffers: dict[str, BufferSpec], skip: set[str], *, loose: bool = False
) -> list[tuple[str, str]]:
    """(node's buffer, input) for each input of ``node`` (not in ``skip``) of the output's
    dtype and size that ``node`` loads only at the address it stores to (``loose``: any
    dtype, only at the element it computes)."""
    out = buffers[node.buf]
    if node.store_index is not None or not all(
        isinstance(x, int) for x in (*node.sizes, *node.strides, node.offset)
    ):
        return []  # a scatter stores where its index says
    found: list[tuple[str, str]] = []
    dims = {f"i{k}": k for k in range(len(node.sizes))}
    store = {v: node.strides[k] for v, k in dims.items() if node.sizes[k] != 1}
    store = {v: st for v, st in store.items() if st != 0}
    loads = list(iter_loads(node))
    for src in sorted({ld.buf for ld in loads}):
        spec = buffers[src]
        if src == node.buf or src in skip:
            continue
        if not loose and (spec.dtype != out.dtype or spec.numel != out.numel):
            continue
        ok = True
        for ld in (x for x in loads if x.buf == src):
            form = affine(ld.index)
            if form is None or not set(form[0]) <= set(dims):
                ok = False
                break
            coefs = {v: c for v, c in form[0].items() if c != 0 and node.sizes[dims[v]] != 1}
            if coefs != store or form[1] != node.offset:
                ok = False
                break
        if ok:
            found.append((node.buf, src))
    return found


def _pool_key(spec: BufferSpec) -> tuple[object, ...]:
    """Dead buffers that ``spec`` may take over: any contiguous one of its size and dtype."""
    if spec.strides == contiguous_strides(spec.sizes):
        return ("contiguous", spec.numel, spec.dtype)
    return (spec.sizes, spec.strides, spec.dtype)


def _reuse(old: BufferSpec, new: BufferSpec) -> str:
    """The wrapper expression giving ``new`` the memory of the dead buffer ``old``."""
    if old.sizes == new.sizes and old.strides == new.strides:
        return old.name
    return f"_as_view({old.name}, {pysizes(new.sizes)}, {pysizes(new.strides)}, 0)"


# matmuls whose result may be written into a dead buffer of the same layout (``out=``)
_OUT_VARIANTS: dict[object, object] = {
    torch.ops.aten.mm.default: torch.ops.aten.mm.out,
    torch.ops.aten.addmm.default: torch.ops.aten.addmm.out,
    torch.ops.aten.bmm.default: torch.ops.aten.bmm.out,
}


# Convolutions through their torch functions: the Python argument parser binds them in ~3 us
# against ~7 us through the operator's schema (``_op``), per call (densenet121: 120 a call).
# Each is the same aten operation with the same positional arguments (thnn_conv2d is
# _slow_conv2d_forward's public name: it calls it).
_TORCH_FUNCTIONS: dict[object, Callable[..., Any]] = {
    torch.ops.aten.convolution.default: torch.convolution,
    torch.ops.aten.mkldnn_convolution.default: torch.mkldnn_convolution,
    torch.ops.aten._slow_conv2d_forward.default: torch._C._nn.thnn_conv2d,  # type: ignore[attr-defined]
}


def _fallback_lines(  # noqa: PLR0917
    k: int,
    node: FallbackNode,
    buffers: dict[str, BufferSpec],
    consts: list[object],
    ns: dict[str, object],
    out_buf: str | None = None,
    kept: KeptBuffers | None = None,
) -> list[str]:
    target = node.target if out_buf is None else _OUT_VARIANTS[node.target]
    # an OpOverload's __call__ is one Python frame around its C++ handle ``_op``: bound
    # directly, ~1 us less per aten call (58 per call of mobilenet_v3_small); the hot ops
    # with a torch function of the same signature get that
    fast = _TORCH_FUNCTIONS.get(target)
    ns[f"_fb{k}"] = (
        fast
        if fast is not None
        else target._op
        if isinstance(target, torch._ops.OpOverload)
        else target
    )
    args = ", ".join(_arg_expr(a, buffers, consts, kept) for a in node.args)
    kwargs = ", ".join(f"{n}={_arg_expr(v, buffers, consts, kept)}" for n, v in node.kwargs)
    if out_buf is not None:
        kwargs = ", ".join(x for x in (kwargs, f"out={out_buf}") if x)
    call = f"_fb{k}({args}{', ' if args and kwargs else ''}{kwargs})"
    lines: list[str] = []
    if node.binds:
        # data-dependent sizes: bound from the result before anything (the result's own
        # layout check below included) reads them
        lines.append(f"    _r{k} = {call}")
        lines.extend(f"    {name} = {path.format(f'_r{k}')}" for name, path in node.binds)
        call = f"_r{k}"
        if all(spec is None for spec in node.outputs):
            lines.append(f"    del _r{k}")
            return lines
    if not node.outputs or all(spec is None for spec in node.outputs):
        lines.append(f"    {call}")  # run for its effect only (a runtime assertion)
        return lines
    if node.multi_output:
        if call != f"_r{k}":
            lines.append(f"    _r{k} = {call}")
        for j, spec in enumerate(node.outputs):
            if spec is not None:
                sizes, strides = pysizes(spec.sizes), pysizes(spec.strides)
                lines.append(f"    {spec.name} = _restride(_r{k}[{j}], {sizes}, {strides})")
        lines.append(f"    del _r{k}")  # the results nobody reads die now
    else:
        spec = node.outputs[0]
        assert spec is not None
        sizes, strides = pysizes(spec.sizes), pysizes(spec.strides)
        # an ``out=`` call returns ``out``, made with the result's layout
        done = call if out_buf is not None else f"_restride({call}, {sizes}, {strides})"
        lines.append(f"    {spec.name} = {done}")
        if node.binds:
            lines.append(f"    del _r{k}")
    return lines


def _overlap_check(graph: LoweredGraph, written: set[str]) -> list[str]:
    """Lines running ``_safe`` instead when an input written in place overlaps another input.

    Sizes and strides are fixed (or expressions of the bound symbols), so each input's
    memory is ``[data_ptr, data_ptr + extent)``; two that intersect share elements.
    """
    tensors = [s for s in graph.inputs if s.name in graph.buffers]
    if not written or len(tensors) < 2:
        return []
    lines = [f"    _p{s.name} = {s.name}.data_ptr()" for s in tensors]
    extent = {s.name: pyexpr(memory_extent(s)) for s in tensors}
    pairs = len(written) * (len(tensors) - 1)
    if pairs > _INLINE_OVERLAP_TESTS:
        # an optimizer step writes hundreds of inputs: pairwise tests would grow with the
        # square of their count; sorting the address ranges is n log n
        ranges = ", ".join(
            f"(_p{s.name}, _p{s.name} + {extent[s.name]}, {s.name in written})" for s in tensors
        )
        lines.append(f"    if _overlapping(({ranges},)):")
        lines.append("        return _safe(args)")
        return lines
    tests = []
    for w in sorted(written):
        for s in tensors:
            if s.name == w or (s.name in written and s.name < w):
                continue
            tests.append(
                f"(_p{w} < _p{s.name} + {extent[s.name]} and _p{s.name} < _p{w} + {extent[w]})"
            )
    lines.append(f"    if {' or '.join(tests)}:")
    lines.append("        return _safe(args)")
    return lines


# Up to this many pairwise address tests are written out inline (cheaper than a sort for
# the few inputs most graphs have); beyond, the wrapper sorts the ranges.
_INLINE_OVERLAP_TESTS = 12


def _written_range_overlaps(ranges: Sequence[tuple[int, int, bool]]) -> bool:
    """Whether a written range ``(start, end, written)`` intersects another range.

    Sorted by start, ranges fall into groups where each overlaps an earlier member of its
    group (or, for the first, the second): a group of two or more holding a written range
    means that range shares memory with another. Empty ranges touch nothing.
    """
    end = -1
    size = 0
    has_written = False
    for start, stop, written in sorted(r for r in ranges if r[1] > r[0]):
        if start >= end:  # a new group
            if size > 1 and has_written:
                return True
            end, size, has_written = stop, 0, False
        size += 1
        has_written = has_written or written
        end = max(end, stop)
    return size > 1 and has_written


def _bind_symbols(graph: LoweredGraph) -> list[str]:
    """Wrapper lines reading each size symbol from the input it is bound to."""
    lines = []
    for b in graph.symbols:
        src = graph.inputs[b.input].name
        value = src if b.dim is None else f"{src}.shape[{b.dim}]"
        if b.boolean:
            value = f"int({src})"  # kernels take it as an integer
        lines.append(f"    {b.symbol.name} = {value}")
    return lines


def _check_bound(fn: Callable[..., object], ns: dict[str, object]) -> None:
    """Every name the generated code reads must be defined: a size symbol it uses but
    cannot read from an input (an unbacked one) would fail at the call, not here."""
    for ins in dis.get_instructions(fn):
        name = ins.argval
        if (
            ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")
            and isinstance(name, str)
            and name not in ns
            and not hasattr(builtins, name)
        ):
            raise UnsupportedGraph(f"size symbol {name} is not the size of an input")


def _has_unbacked(sizes: Sequence[Size]) -> bool:
    return any(
        symbol_is_type(sym, SymT.UNBACKED_INT)
        for s in sizes
        if isinstance(s, sympy.Expr)
        for sym in s.free_symbols
    )


def _strides_agree(shape: Sequence[int], strides: Sequence[int], expected: Sequence[int]) -> bool:
    """Strides equal on every dim of more than one element (the others address nothing
    beyond element 0, whatever their stride)."""
    return all(n <= 1 or a == b for n, a, b in zip(shape, strides, expected, strict=True))


def build_input_check(graph: LoweredGraph) -> Callable[[Sequence[Any]], bool]:
    """A per-call check for a graph with size symbols: may the compiled code run on ``args``?

    It binds the symbols from the inputs as the wrapper does, then requires every tensor
    input's dtype, device, sizes and strides to equal what the code was generated for,
    with the symbols' values put in; static dims are compared exactly and each symbol must
    be at least 2 (the guards above us specialise 0 and 1, and the code relies on it).
    Non-tensor inputs that are not symbols must equal their example values.
    """
    ns: dict[str, object] = {"_Tensor": torch.Tensor}
    n = len(graph.inputs)
    lines = ["def check(args):", f"    if len(args) != {n}:", "        return False"]
    if n:
        names = ", ".join(s.name for s in graph.inputs)
        lines.append(f"    {names}{',' if n == 1 else ''} = args")
    scalar_symbols = set(graph.scalar_inputs)
    bools = {b.input for b in graph.symbols if b.boolean}
    for k, spec in enumerate(graph.inputs):
        name = spec.name
        if spec.name in graph.buffers:
            ns[f"_dt{k}"] = spec.dtype
            ns[f"_dev{k}"] = graph.device
            lines.append(
                f"    if not isinstance({name}, _Tensor) or {name}.dtype != _dt{k} or "
                f"{name}.device != _dev{k} or {name}.dim() != {len(spec.sizes)}:"
            )
            lines.append("        return False")
        elif k in scalar_symbols:
            lines.append(f"    if type({name}) is not int:")
            lines.append("        return False")
        elif k in graph.float_inputs:
            lines.append(f"    if type({name}) is not float:")
            lines.append("        return False")
        elif k in bools:
            lines.append(f"    if type({name}) is not bool:")
            lines.append("        return False")
    lines += _bind_symbols(graph)
    for b in graph.symbols:
        if b.boolean:
            continue  # 0 or 1, both compiled for
        # a data-dependent size (a backward's input sized by a mask) may be 0 or 1: nothing
        # above us specialised it, and the code was generated for any value of it
        least = 0 if symbol_is_type(b.symbol, SymT.UNBACKED_INT) else 2
        lines.append(f"    if {b.symbol.name} < {least}:")
        lines.append("        return False")
    for k, value in graph.scalar_inputs.items():
        lines.append(f"    if {graph.inputs[k].name} != {pyexpr(value)}:")
        lines.append("        return False")
    ns["_strides_agree"] = _strides_agree
    for spec in graph.inputs:
        name = spec.name
        if spec.name in graph.buffers and _has_unbacked(spec.sizes):
            # a dim of a data-dependent size may hold 0 or 1 element, where any stride
            # (aot's contiguous tangents give 0) addresses the same memory
            lines.append(
                f"    if {name}.shape != {pysizes(spec.sizes)} or not "
                f"_strides_agree({name}.shape, {name}.stride(), {pysizes(spec.strides)}):"
            )
            lines.append("        return False")
        elif spec.name in graph.buffers:
            # as static_check.py: any stride on a dim of one element
            agree = f"{name}.stride() != {pysizes(spec.strides)}"
            if any(s == 1 for s in spec.sizes):
                agree = (
                    f"({agree} and not _strides_agree({name}.shape, {name}.stride(), "
                    f"{pysizes(spec.strides)}))"
                )
            lines.append(f"    if {name}.shape != {pysizes(spec.sizes)} or {agree}:")
            lines.append("        return False")
    lines.append("    return True")
    source = "\n".join(lines) + "\n"
    exec(compile(source, _WRAPPER_FILENAME, "exec"), ns)
    check = ns["check"]
    assert callable(check)
    _check_bound(check, ns)
    return check  # type: ignore[no-any-return]
