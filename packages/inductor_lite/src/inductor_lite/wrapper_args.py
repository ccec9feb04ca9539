"""How the generated wrapper names a tensor argument or an aten result: views, restrides.

A view of a buffer is ``_as_view(buf, sizes, strides, offset)`` in the wrapper (~1.6 us per
call: a Python frame, ``storage_offset`` and ``as_strided``); a view of a kept buffer
(kept_buffers.py) is made once, when the wrapper is built, and named by a global. A
transformer's backward passes ~30-60 such views to mm/bmm per call.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import sympy
import torch

from .ir import BufferSpec, TensorRef
from .kept_buffers import KeptBuffers
from .symbolic import Size, pyexpr, pysizes

__all__ = ["arg_expr", "as_view", "ref_expr", "restride"]


def as_view(
    t: torch.Tensor, sizes: Sequence[Size], strides: Sequence[Size], offset: Size
) -> torch.Tensor:
    return t.as_strided(sizes, strides, t.storage_offset() + offset)


def restride(t: torch.Tensor, sizes: Sequence[Size], strides: Sequence[Size]) -> torch.Tensor:
    """``t`` laid out with the strides the kernels were generated for.

    A dim of one element addresses nothing beyond its first, whatever its stride: an aten
    result differing only there (a 1x1 convolution's (1, C, 1, 1) output, strides (C, 1, 1, 1)
    where its meta said (C, 1, C, C)) is already that layout, and is not copied."""
    got = t.stride()
    if got == tuple(strides) or t.numel() <= 1:
        return t
    if all(n == 1 or a == b for n, a, b in zip(t.shape, got, strides, strict=True)):
        return t
    out = torch.empty_strided(sizes, strides, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out


def ref_expr(
    ref: TensorRef, buffers: dict[str, BufferSpec], kept: KeptBuffers | None = None
) -> str:
    """The wrapper expression for ``ref``: its buffer, a kept view's global, or a view made
    per call."""
    spec = buffers[ref.buf]
    if ref.offset == 0 and ref.sizes == spec.sizes and ref.strides == spec.strides:
        return ref.buf
    view = None if kept is None else kept.view(ref.buf, ref.sizes, ref.strides, ref.offset)
    if view is not None:
        return view
    return (
        f"_as_view({ref.buf}, {pysizes(ref.sizes)}, {pysizes(ref.strides)}, {pyexpr(ref.offset)})"
    )


def arg_expr(
    a: object, buffers: dict[str, BufferSpec], consts: list[object], kept: KeptBuffers | None = None
) -> str:
    """An aten call's argument: tensors as ``ref_expr``, literals as themselves, other values
    as constants ``_c<n>`` (appended to ``consts``)."""
    if isinstance(a, TensorRef):
        return ref_expr(a, buffers, kept)
    if isinstance(a, list | tuple):
        inner = ", ".join(arg_expr(x, buffers, consts, kept) for x in a)
        return f"[{inner}]" if isinstance(a, list) else f"({inner},)"
    if isinstance(a, float) and not math.isfinite(a):
        # repr gives `nan`/`inf`, which the wrapper would read as (unbound) size symbols
        return f"float({str(a)!r})"
    if a is None or isinstance(a, bool | int | float | str):
        return repr(a)
    if isinstance(a, sympy.Expr):
        return pyexpr(a)
    consts.append(a)
    return f"_c{len(consts) - 1}"
