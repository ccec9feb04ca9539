"""Reduction accumulators, and long float sums in chunks (C++ code generation).

A vectorised ``float`` sum adds each of its 16 lanes' n/16 terms one after another, so its
rounding error grows with n: a training batch norm's statistics and its weight and bias
gradients sum N*H*W values per channel (401K for resnet18's first stage at 8x224x224), where a
plain float accumulator lost ~1e-3 of the result against float64. Splitting the row into
chunks of ``CHUNK`` terms, each summed in a fresh vector accumulator and added to a ``double``
total, bounds the error by about CHUNK/16 roundings (plus the chunk count's in double) and
keeps the inner loop as fast as before: the double adds happen once per chunk.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .errors import LoweringError
from .ir import Op, ReductionNode

__all__ = ["CHUNK", "chunked_reduction", "reduction_setup", "wants_chunks"]

# terms per chunk: error ~ (CHUNK / 16) * eps, per-chunk overhead negligible
CHUNK = 4096


def chunked_reduction(  # noqa: PLR0917
    ind: str,
    accs: Sequence[tuple[str, str, Op]],
    clause: str,
    when: str | None,
    n: int,
    loop_body: Sequence[str],
) -> list[str]:
    """The loop over ``ri`` in [0, n) split into chunks.

    ``accs``: (accumulator, its C type, reduction kind) for each accumulator the loop
    updates; float sums get a ``double`` total over the chunks, the others (max, min, NaN
    flags) just carry over from one chunk to the next. ``clause`` is the inner loop's omp
    reduction clause and ``loop_body`` the lines inside it, as for one loop. ``when`` (the
    kernel's ``if(...)`` clause, or "") makes the loop over chunks an OpenMP parallel loop:
    every accumulator must then be a float sum. After the returned lines each float sum's
    accumulator holds the whole row's sum.
    """
    sums = [a for a, ct, kind in accs if kind is Op.SUM and ct == "float"]
    lines = [f"{ind}double {a}_total = 0.0;" for a in sums]
    if when is not None:
        totals = ", ".join(f"{a}_total" for a in sums)
        private = ", ".join(sums)
        lines.append(
            f"{ind}#pragma omp parallel for reduction(+:{totals}) private({private}){when}"
        )
    lines.append(f"{ind}for (int64_t rb = 0; rb < {n}LL; rb += {CHUNK}LL) {{")
    lines.append(f"{ind}    const int64_t re = std::min<int64_t>(rb + {CHUNK}LL, {n}LL);")
    lines += [f"{ind}    {a} = 0.0f;" for a in sums]
    lines.append(f"{ind}    #pragma omp simd {clause}")
    lines.append(f"{ind}    for (int64_t ri = rb; ri < re; ++ri) {{")
    lines += ["    " + line for line in loop_body]
    lines.append(f"{ind}    }}")
    lines += [f"{ind}    {a}_total += static_cast<double>({a});" for a in sums]
    lines.append(f"{ind}}}")
    lines += [f"{ind}{a} = static_cast<float>({a}_total);" for a in sums]
    return lines


def wants_chunks(kinds: Sequence[tuple[str, Op]], n: object, parallel: bool) -> bool:
    """Chunk a loop of a static length over CHUNK with a float sum in it (every accumulator
    a float sum when the loop is the kernel's parallel one)."""
    sums = [kind is Op.SUM and ct == "float" for ct, kind in kinds]
    return isinstance(n, int) and n > CHUNK and (all(sums) if parallel else any(sums))


_ACC_INIT = {Op.SUM: "0", Op.PROD: "1"}


def reduction_setup(node: ReductionNode, acc: str, ct: str) -> tuple[str, str, str, str]:
    """(declaration, combine statement given ``{v}``, omp clause, finalisation); ``ct`` is
    the C type the node's values are computed in."""
    is_float = node.dtype.is_floating_point
    if node.reduction in _ACC_INIT:
        sym = "+" if node.reduction is Op.SUM else "*"
        return (
            f"{ct} {acc} = {ct}({_ACC_INIT[node.reduction]});",
            f"{acc} = {acc} {sym} {{v}};",
            f"reduction({sym}:{acc})",
            "",
        )
    if node.reduction not in (Op.MAX, Op.MIN):
        raise LoweringError(f"no C++ reduction for {node.reduction.value}")
    op = "max" if node.reduction is Op.MAX else "min"
    # std::max/min: GCC turns them into a vector max reduction; the equivalent
    # `(v > acc) ? v : acc` became a conditional reduction twice as slow (NaN has its flag)
    update = f"{acc} = std::{op}<{ct}>({acc}, {{v}});"
    init = "lowest" if op == "max" else "max"
    if is_float:
        init_v = ("-" if op == "max" else "") + f"std::numeric_limits<{ct}>::infinity()"
        return (
            # an int flag, not bool: GCC vectorises an int |-reduction, not a bool one
            f"{ct} {acc} = {init_v}; int {acc}_nan = 0;",
            f"{update} {acc}_nan |= ({{v}} != {{v}});",
            f"reduction({op}:{acc}) reduction(|:{acc}_nan)",
            f"if ({acc}_nan) {acc} = std::numeric_limits<{ct}>::quiet_NaN();",
        )
    if node.dtype == torch.bool:
        raise LoweringError("bool max/min reductions are not lowered")
    return (
        f"{ct} {acc} = std::numeric_limits<{ct}>::{init}();",
        update,
        f"reduction({op}:{acc})",
        "",
    )
