"""Column sums: a sum whose input runs contiguously along its outputs (C++ code generation).

A channels-last activation averaged over H and W (a CNN's global pool, every
squeeze-excitation block of an efficientnet or a regnet) is, for each channel ``c``, a sum of
``x[c + C * (w + W * h)]`` over ``(h, w)``. The row kernel (cpp.py) computes one channel at a
time with its reduction loop inside, reading with a stride of C floats; aten's ``mean``
vectorises across the channels but costs 40-90 us per call inside a model (its first call
after other work; 9 us when repeated), against a few for the sum itself. Here the loops are
interchanged: for a block of ``OUT_BLOCK`` outputs the reduction loop runs outside and the
outputs inside, each a lane of a vector accumulator, so every load is a contiguous vector.

Numerics: each output's terms are added in order into a float accumulator for ``ROW_CHUNK``
terms at a time, and the chunks into a ``double`` total (as cascade.py does for row sums):
the error stays about ``ROW_CHUNK`` roundings however long the reduction.
"""

from __future__ import annotations

import math

import torch

from .cpp_expr import Body, store_expr
from .cpp_prelude import compute_type
from .ir import ReductionNode
from .scheduler import Kernel, Step, is_column_sum

__all__ = ["OUT_BLOCK", "ROW_CHUNK", "column_lines", "column_steps"]

# outputs per block: the block's accumulators (float and double) stay in L1
OUT_BLOCK = 512
# terms per output added in float before they go into the double total
ROW_CHUNK = 64


def column_steps(kernel: Kernel) -> list[Step]:
    """The kernel's leading steps that are column sums (``is_column_sum``): the first, and
    the column sums that joined it (scheduler.py)."""
    out: list[Step] = []
    for step in kernel.steps:
        node = step.node
        if not isinstance(node, ReductionNode) or step.split != len(node.out_sizes):
            break
        if not is_column_sum(node):
            break
        out.append(step)
    return out


def column_lines(
    step: Step, params: dict[str, str], dtypes: dict[str, torch.dtype], n: int, parallel: bool
) -> list[str]:
    """Statements computing ``step`` (one of ``column_steps``) for all its outputs; ``n`` numbers
    the step, ``parallel`` spreads the images (or the output blocks) over OpenMP threads.

    The innermost output dim of more than one element (the channels) is the vector lane;
    the output dims before it (the images of a batch) are loops outside everything."""
    node = step.node
    assert isinstance(node, ReductionNode)
    names = step.var_names
    k = len(node.out_sizes)
    outs = [int(s) for s in node.out_sizes]  # type: ignore[call-overload]
    red = [int(s) for s in node.red_sizes]  # type: ignore[call-overload]
    j = max(d for d in range(k) if outs[d] != 1)
    lanes = outs[j]
    n_outer = math.prod(outs[:j])
    ct = compute_type(node.dtype)
    block = min(OUT_BLOCK, lanes)
    acc, tot = f"acc{n}", f"tot{n}"

    def at(depth: int) -> str:
        return "    " * depth

    lines = [f"{at(1)}{{  // step {n}: {type(node).__name__} -> {node.buf}, column-wise"]
    if n_outer > 1:
        if parallel:
            lines.append(f"{at(1)}#pragma omp parallel for schedule(static)")
        lines.append(f"{at(1)}for (int64_t oo = 0; oo < {n_outer}LL; ++oo) {{")
    else:
        lines.append(f"{at(1)}{{ constexpr int64_t oo = 0;")
    lines += _defs(names[:j], node.out_sizes[:j], "oo", at(2))
    lines += [f"{at(2)}const int64_t {name} = 0LL;" for name in names[j + 1 : k]]
    if lanes <= block:
        # one block of a static length: GCC knows the vector loop's trip count
        lines += [f"{at(2)}{{", f"{at(3)}constexpr int64_t ob = 0, oe = {lanes}LL;"]
    else:
        if parallel and n_outer == 1:
            lines.append(f"{at(2)}#pragma omp parallel for schedule(static)")
        lines += [
            f"{at(2)}for (int64_t ob = 0; ob < {lanes}LL; ob += {block}LL) {{",
            f"{at(3)}const int64_t oe = std::min<int64_t>(ob + {block}LL, {lanes}LL);",
        ]
    lines.append(f"{at(3)}{ct} {acc}[{block}];")
    # reduction dims as nested loops (no division per term); size-1 dims are constants
    loops = [(f"r{d}", size) for d, size in enumerate(red) if size != 1]
    lines += [f"{at(3)}const int64_t r{d} = 0LL;" for d, size in enumerate(red) if size == 1]
    # chunks: each pass of the outermost loop (or ROW_CHUNK terms of a single one) is summed
    # in float, then added into a double total
    chunked = math.prod(red) > ROW_CHUNK
    single = len(loops) == 1
    depth = 4 if chunked else 3
    if chunked:
        inner_loops = [] if single else loops[1:]
    else:
        inner_loops = loops
    body_depth = depth + len(inner_loops) + (1 if chunked and single else 0)
    body = Body(at(body_depth + 1), params, dtypes, [names[j]], at(body_depth))
    val = body.value(node.body)
    nest = [
        f"{at(depth)}#pragma omp simd",
        f"{at(depth)}for (int64_t o = ob; o < oe; ++o) {acc}[o - ob] = {ct}(0);",
    ]
    d = depth
    if chunked and single:
        var = loops[0][0]
        nest.append(f"{at(d)}for (int64_t {var} = rb; {var} < re; ++{var}) {{")
        d += 1
    for var, size in inner_loops:
        nest.append(f"{at(d)}for (int64_t {var} = 0; {var} < {size}LL; ++{var}) {{")
        d += 1
    nest += [
        *body.pre,
        f"{at(d)}#pragma omp simd",
        f"{at(d)}for (int64_t o = ob; o < oe; ++o) {{",
        f"{at(d + 1)}const int64_t {names[j]} = o;",
        *body.lines,
        f"{at(d + 1)}{acc}[o - ob] = {acc}[o - ob] + {val};",
        f"{at(d)}}}",
    ]
    while d > depth:
        d -= 1
        nest.append(f"{at(d)}}}")
    if chunked:
        var, size = loops[0]
        if single:
            head = [
                f"{at(3)}for (int64_t rb = 0; rb < {size}LL; rb += {ROW_CHUNK}LL) {{",
                f"{at(4)}const int64_t re = std::min<int64_t>(rb + {ROW_CHUNK}LL, {size}LL);",
            ]
        else:
            head = [f"{at(3)}for (int64_t {var} = 0; {var} < {size}LL; ++{var}) {{"]
        total = f"static_cast<{ct}>({tot}[o - ob])"
        lines += [
            f"{at(3)}double {tot}[{block}];",
            f"{at(3)}for (int64_t o = ob; o < oe; ++o) {tot}[o - ob] = 0.0;",
            *head,
            *nest,
            f"{at(4)}#pragma omp simd",
            f"{at(4)}for (int64_t o = ob; o < oe; ++o)"
            f" {tot}[o - ob] += static_cast<double>({acc}[o - ob]);",
            f"{at(3)}}}",
        ]
    else:
        total = f"{acc}[o - ob]"
        lines += nest
    stored = store_expr(dtypes[node.buf], total)
    dest = f"{params[node.buf]}[oo * {lanes}LL + o]"
    lines += [
        f"{at(3)}for (int64_t o = ob; o < oe; ++o) {dest} = {stored};",
        f"{at(2)}}}",
        f"{at(1)}}}",
        f"{at(1)}}}",
    ]
    return lines


def _defs(names: list[str], sizes: tuple[object, ...], var: str, indent: str) -> list[str]:
    """Each variable of ``names`` recovered from the flat counter ``var`` (row-major)."""
    out: list[str] = []
    below = 1
    parts: list[tuple[str, int, int]] = []
    for name, size in zip(reversed(names), reversed(sizes), strict=True):
        parts.append((name, int(size), below))  # type: ignore[call-overload]
        below *= int(size)  # type: ignore[call-overload]
    for name, size, under in reversed(parts):
        if size == 1:
            expr = "0LL"
        elif under == 1 and under * size == below:
            expr = var
        elif under == 1:
            expr = f"({var} % {size}LL)"
        elif under * size == below:
            expr = f"({var} / {under}LL)"
        else:
            expr = f"(({var} / {under}LL) % {size}LL)"
        out.append(f"{indent}const int64_t {name} = {expr};")
    return out
