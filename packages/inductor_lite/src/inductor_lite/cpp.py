"""C++/OpenMP code generation: one translation unit per graph, one function per kernel.

The prelude (types, helpers, vector math) is in cpp_prelude.py, value expressions in cpp_expr.py;
this module lays out the loops of each kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .cascade import chunked_reduction, reduction_setup, wants_chunks
from .column_sum import column_lines, column_steps
from .cpp_expr import Body, load_expr, store_expr
from .cpp_prelude import LIBMVEC_DECLS, LIBMVEC_FUNCTIONS, PRELUDE, STORAGE, compute_type
from .ir import BufferSpec, Op, PointwiseNode, ReductionNode, VExpr, VIndex
from .kernel_body import flat_digits
from .row_scratch import MAX_ROW, canonical_step, plan_scratch
from .scheduler import Kernel, Step, iter_loads, kernel_symbols
from .symbolic import Size, cexpr, is_static, same

__all__ = ["LIBMVEC_DECLS", "LIBMVEC_FUNCTIONS", "KernelSource", "generate_cpp"]


def _var_defs(names: Sequence[str], sizes: Sequence[Size], loop_var: str, indent: str) -> list[str]:
    """Recover per-dimension variables from a flattened loop counter."""
    out: list[str] = []
    for name, size, below, leading in flat_digits(names, sizes):
        if size == 1:
            expr = "0LL"
        elif same(below, 1) and leading:
            expr = loop_var
        elif same(below, 1):
            expr = f"({loop_var} % {cexpr(size)})"
        elif leading:
            expr = f"({loop_var} / {cexpr(below)})"
        else:
            expr = f"(({loop_var} / {cexpr(below)}) % {cexpr(size)})"
        out.append(f"{indent}const int64_t {name} = {expr};")
    return out


@dataclass(frozen=True)
class KernelSource:
    name: str
    params: tuple[str, ...]  # buffer names, in argument order
    symbols: tuple[str, ...] = ()  # size symbols (int64_t), after the buffers


def _kernel(
    kernel: Kernel, buffers: dict[str, BufferSpec], threshold: int
) -> tuple[str, KernelSource]:
    used: list[str] = []
    written: set[str] = set()
    for step in kernel.steps:
        written.add(step.node.buf)
        for name in [step.node.buf, *(ld.buf for ld in iter_loads(step.node))]:
            if name not in used:
                used.append(name)
    params = {name: f"p_{name}" for name in used}
    sig = ", ".join(
        f"{'' if n in written else 'const '}{STORAGE[buffers[n].dtype]}* __restrict__ {params[n]}"
        for n in used
    )
    symbols = kernel_symbols(kernel)
    if symbols:
        sig = ", ".join([sig, *(f"int64_t {name}" for name in symbols)])
    dtypes = {n: buffers[n].dtype for n in used}
    rows = kernel.outer_numel
    work = kernel.work
    if is_static(work) and is_static(rows):
        parallel_outer = rows > 1 and work >= threshold and rows >= 4  # type: ignore[operator]
        parallel_inner = not parallel_outer and work >= threshold  # type: ignore[operator]
        when = ""
    else:
        # decided per call by OpenMP's if clause: the sizes are known only then
        parallel_outer = not is_static(rows) or rows >= 4  # type: ignore[operator]
        parallel_inner = not parallel_outer
        when = f" if({cexpr(work)} >= {threshold}LL)"
    if any(isinstance(s.node, PointwiseNode) and s.node.accumulate for s in kernel.steps):
        # a scatter's rows may add into one element: they run in order, on one thread
        parallel_inner = parallel_inner or parallel_outer
        parallel_outer = False
    lines = [f'extern "C" void {kernel.name}({sig}) {{']
    steps = list(enumerate(kernel.steps))
    columns = column_steps(kernel)
    if columns:
        # a channels-last pool: the reduction loop outside, the outputs vectorised inside;
        # the steps after it (its division, ...) run in the row loop below
        parallel = not is_static(work) or work >= threshold  # type: ignore[operator]
        for n, column in enumerate(columns):
            lines += column_lines(column, params, dtypes, n, parallel)
        steps = steps[len(columns) :]
        if not steps:
            return "\n".join([*lines, "}"]), KernelSource(kernel.name, tuple(used), symbols)
    if parallel_outer:
        lines.append(f"    #pragma omp parallel for schedule(static){when}")
    lines.append(f"    for (int64_t o = 0; o < {cexpr(rows)}; ++o) {{")
    # emission units: one step, or several same-shaped reductions sharing one loop
    units: list[list[tuple[int, Step]]] = []
    for n, step in steps:
        last = units[-1] if units else None
        if (
            isinstance(step.node, ReductionNode)
            and last is not None
            and isinstance(last[0][1].node, ReductionNode)
            and _joins(last, step)
        ):
            last.append((n, step))
        else:
            units.append([(n, step)])
    canon = [[(n, *canonical_step(st)) for n, st in unit] for unit in units]
    plan = plan_scratch([[(st, names) for _, st, names in unit] for unit in canon])
    for name, value, length in plan.arrays:
        ct = compute_type(value.dtype)
        if is_static(length):
            lines.append(f"        {ct} {name}[{length}];  // one row")
            continue
        # a symbolic row: on the stack up to MAX_ROW elements, else one heap row per row
        # (its work then dwarfs the allocation)
        row = cexpr(length)
        lines += [
            f"        {ct} {name}_stack[{MAX_ROW}];",
            f"        std::unique_ptr<{ct}[]> {name}_heap;",
            f"        {ct}* {name} = {name}_stack;  // one row",
            f"        if ({row} > {MAX_ROW}LL) {{",
            f"            {name}_heap.reset(new {ct}[{row}]);",
            f"            {name} = {name}_heap.get();",
            "        }",
        ]
    for u, unit in enumerate(canon):
        w, r = plan.writes[u], plan.reads[u]
        # a small step in a kernel parallel over its inner loops stays on one thread: a
        # one-row kernel holds per-channel vectors beside an image-sized reduction
        inner = [st.inner_numel for _, st, _ in unit]
        unit_parallel = parallel_inner and not (
            not when and all(is_static(x) for x in inner) and rows * max(inner) < threshold  # type: ignore[operator]
        )
        if len(unit) == 1:
            n, st, names = unit[0]
            lines.extend(
                _step(
                    st,
                    n,
                    names,
                    params,
                    dtypes,
                    unit_parallel,
                    w,
                    r,
                    when if unit_parallel else "",
                )
            )
        else:
            lines.extend(
                _reduction_group(
                    unit, params, dtypes, unit_parallel, w, r, when if unit_parallel else ""
                )
            )
    lines.append("    }")
    lines.append("}")
    return "\n".join(lines), KernelSource(kernel.name, tuple(used), symbols)


def _joins(group: Sequence[tuple[int, Step]], step: Step) -> bool:
    """A reduction shares the group's loop if it has its shape and reads none of its results."""
    node = step.node
    first = group[0][1].node
    assert isinstance(node, ReductionNode) and isinstance(first, ReductionNode)
    if (node.out_sizes, node.red_sizes) != (first.out_sizes, first.red_sizes):
        return False
    written = {s.node.buf for _, s in group}
    return not any(ld.buf in written for ld in iter_loads(node))


def _reduction_group(  # noqa: PLR0917
    group: list[tuple[int, Step, list[str]]],
    params: dict[str, str],
    dtypes: dict[str, torch.dtype],
    parallel: bool,
    scratch_write: dict[VExpr, str],
    scratch_read: dict[VExpr, str],
    when: str = "",
) -> list[str]:
    """Several reductions of the same shape in one loop (their inputs loaded once)."""
    first = group[0][1]
    names = group[0][2]
    ind = "        "
    lines = [f"{ind}{{  // steps {', '.join(str(g[0]) for g in group)}: reductions, one loop"]
    lines += _var_defs(names[: first.split], first.outer_sizes, "o", ind + "    ")
    body = Body(
        ind + "        ",
        params,
        dtypes,
        names[first.split :],
        ind + "    ",
        scratch_write,
        scratch_read,
    )
    parts = []
    for n, step, _ in group:
        node = step.node
        assert isinstance(node, ReductionNode)
        acc = f"acc{n}"
        parts.append(
            (node, acc, reduction_setup(node, acc, compute_type(node.dtype)), body.value(node.body))
        )
    lines += body.pre
    lines += [f"{ind}    {setup[0]}" for _, _, setup, _ in parts]
    clauses = " ".join(setup[2] for _, _, setup, _ in parts)
    loop = _var_defs(names[first.split :], first.inner_sizes, "ri", ind + "        ")
    loop += body.lines
    loop += [f"{ind}        " + setup[1].format(v=val) for _, _, setup, val in parts]
    accs = [(acc, compute_type(node.dtype), node.reduction) for node, acc, _, _ in parts]
    lines += _reduction_loop(ind, accs, clauses, when, first.inner_numel, loop, parallel)
    for node, acc, setup, _ in parts:
        if setup[3]:
            lines.append(f"{ind}    {setup[3]}")
        lines.append(f"{ind}    {params[node.buf]}[o] = {store_expr(dtypes[node.buf], acc)};")
    lines.append(f"{ind}}}")
    return lines


def _reduction_loop(  # noqa: PLR0917
    ind: str,
    accs: Sequence[tuple[str, str, Op]],
    clause: str,
    when: str,
    n: Size,
    loop: list[str],
    parallel: bool,
) -> list[str]:
    """The inner reduction loop: long float sums in chunks (cascade.py), else one loop."""
    if wants_chunks([(ct, kind) for _, ct, kind in accs], n, parallel):
        return chunked_reduction(
            ind + "    ", accs, clause, when if parallel else None, int(n), loop
        )
    pragma = "#pragma omp parallel for simd" if parallel else "#pragma omp simd"
    head = f"{ind}    for (int64_t ri = 0; ri < {cexpr(n)}; ++ri) {{"
    return [f"{ind}    {pragma} {clause}{when if parallel else ''}", head, *loop, f"{ind}    }}"]


def _step(  # noqa: PLR0917
    step: Step,
    n: int,
    names: list[str],
    params: dict[str, str],
    dtypes: dict[str, torch.dtype],
    parallel: bool,
    scratch_write: dict[VExpr, str],
    scratch_read: dict[VExpr, str],
    when: str = "",
) -> list[str]:
    node = step.node
    ind = "        "
    lines = [f"{ind}{{  // step {n}: {type(node).__name__} -> {node.buf}"]
    lines += _var_defs(names[: step.split], step.outer_sizes, "o", ind + "    ")
    inner = step.inner_numel
    has_inner = len(step.inner_sizes) > 0
    # a reduction's body is always inside its inner loop
    in_loop = has_inner or not isinstance(node, PointwiseNode)
    body = Body(
        ind + ("        " if in_loop else "    "),
        params,
        dtypes,
        names[step.split :],
        ind + "    ",
        scratch_write,
        scratch_read,
    )
    if isinstance(node, PointwiseNode):
        store_idx = " + ".join(
            [cexpr(node.offset)]
            + [f"{v} * {cexpr(s)}" for v, s in zip(names, node.strides, strict=True) if s != 0]
        )
        conflicts = False
        if node.store_index is not None:
            store_idx += f" + {body.value(VIndex(node.store_index, torch.int64))}"
            # iterations of an inner loop the index varies along may name one element
            conflicts = node.accumulate and body.depends(VIndex(node.store_index, torch.int64))
        val = body.value(node.body)
        dest = f"{params[node.buf]}[{store_idx}]"
        if node.accumulate:
            ct = compute_type(dtypes[node.buf])
            val = f"static_cast<{ct}>({load_expr(dtypes[node.buf], dest)} + {val})"
        stored = store_expr(dtypes[node.buf], val)
        store = f"{body.indent}{dest} = {stored};"
        lines += body.pre
        if has_inner:
            pragma = "#pragma omp parallel for simd" if parallel else "#pragma omp simd"
            if conflicts:
                pragma, parallel = "// in order: iterations may add into one element", False
            lines.append(f"{ind}    {pragma}{when if parallel else ''}")
            lines.append(f"{ind}    for (int64_t ri = 0; ri < {cexpr(inner)}; ++ri) {{")
            lines += _var_defs(names[step.split :], step.inner_sizes, "ri", ind + "        ")
            lines += body.lines
            lines.append(store)
            lines.append(f"{ind}    }}")
        else:
            lines += body.lines
            lines.append(store)
    else:
        acc = f"acc{n}"
        decl, combine, clause, final = reduction_setup(node, acc, compute_type(node.dtype))
        val = body.value(node.body)
        lines += body.pre
        lines.append(f"{ind}    {decl}")
        loop = _var_defs(names[step.split :], step.inner_sizes, "ri", ind + "        ")
        loop += [*body.lines, f"{ind}        " + combine.format(v=val)]
        accs = [(acc, compute_type(node.dtype), node.reduction)]
        lines += _reduction_loop(ind, accs, clause, when, inner, loop, parallel)
        if final:
            lines.append(f"{ind}    {final}")
        lines.append(f"{ind}    {params[node.buf]}[o] = {store_expr(dtypes[node.buf], acc)};")
    lines.append(f"{ind}}}")
    return lines


def generate_cpp(
    kernels: Sequence[Kernel],
    buffers: dict[str, BufferSpec],
    parallel_threshold: int,
    *,
    libmvec: bool = False,
) -> tuple[str, list[KernelSource]]:
    """The translation unit for a graph's kernels, and each kernel's parameter list.

    ``libmvec``: declare libm's functions vectorisable (the library must then be linked
    with ``-lmvec``); without it sin/cos/log & co. stay scalar libm calls.
    """
    parts = [PRELUDE + (LIBMVEC_DECLS if libmvec else "")]
    sources: list[KernelSource] = []
    for kernel in kernels:
        text, src = _kernel(kernel, buffers, parallel_threshold)
        parts.append(text)
        sources.append(src)
    return "\n\n".join(parts) + "\n", sources
