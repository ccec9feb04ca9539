"""The op fuzzer's inputs: one spec per argument, built into a fresh tensor for every call.

A spec is ``(shape, dtype, layout, fill)``, all plain literals, so a saved program carries its
inputs as text. ``layout`` gives the tensor its strides: ``contig``, ``transposed`` (the last two
dims swapped), ``offset`` (a nonzero storage offset), ``strided`` (every other element of the
last dim), ``channels_last`` (4-D) or ``expanded`` (a stride-0 dim). ``fill`` says what the
values are: ``normal``, ``special`` (NaN, +-inf, -0.0 and 0.0 mixed in), ``positive``,
``distinct`` (no two equal, even in bfloat16: sorts and argmax have no ties), ``int`` (small
integers of either sign), ``shift:K`` (0..K-1: shift amounts), ``index:LO:HI`` (LO..HI-1:
indices, negative ones included), ``perm:D`` (a permutation of range(size) along dim D: scatter
without duplicate targets) or ``mask``.
"""

from __future__ import annotations

import torch

__all__ = ["DTYPES", "Spec", "make_input", "make_inputs"]

Spec = tuple[tuple[int, ...], str, str, str]

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int32": torch.int32,
    "int64": torch.int64,
    "bool": torch.bool,
}


def _values(
    shape: tuple[int, ...], dtype: torch.dtype, fill: str, g: torch.Generator
) -> torch.Tensor:
    n = 1
    for s in shape:
        n *= s
    if fill == "mask" or dtype == torch.bool:
        return (torch.rand(shape, generator=g) < 0.5).to(dtype)
    if fill.startswith("index:"):
        lo, hi = (int(v) for v in fill.split(":")[1:])
        return torch.randint(lo, hi, shape, generator=g).to(dtype)
    if fill.startswith("shift:"):
        return torch.randint(0, int(fill.split(":")[1]), shape, generator=g).to(dtype)
    if fill.startswith("perm:"):
        dim = int(fill.split(":")[1])
        moved = list(shape)
        size = moved.pop(dim)
        rows = 1
        for s in moved:
            rows *= s
        perms = torch.stack([torch.randperm(size, generator=g) for _ in range(rows)])
        return perms.reshape(*moved, size).movedim(-1, dim).contiguous().to(dtype)
    if fill == "int" or not dtype.is_floating_point:
        return torch.randint(-9, 10, shape, generator=g).to(dtype)
    if fill == "distinct":
        # halves of distinct small integers: exact in every float dtype up to 256 elements
        perm = torch.randperm(n, generator=g).to(torch.float64)
        return ((perm - n / 2) * 0.5).reshape(shape).to(dtype)
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    if fill == "positive":
        x = x.abs() + 0.25
    if fill == "special":
        specials = torch.tensor(
            [float("nan"), float("inf"), float("-inf"), -0.0, 0.0], dtype=torch.float64
        )
        pick = torch.randint(0, len(specials), shape, generator=g)
        where = torch.rand(shape, generator=g) < 0.3
        x = torch.where(where, specials[pick], x)
    return x.to(dtype)


def make_input(spec: Spec, seed: int, index: int, call_set: int) -> torch.Tensor:
    """Input ``index`` of a program for value set ``call_set``: a new tensor every time."""
    shape, dtype_name, layout, fill = spec
    dtype = DTYPES[dtype_name]
    g = torch.Generator().manual_seed(seed * 1009 + index * 31 + call_set)
    if layout == "transposed" and len(shape) >= 2:
        base = _values((*shape[:-2], shape[-1], shape[-2]), dtype, fill, g)
        return base.transpose(-1, -2)
    if layout == "offset":
        base = _values((3, *shape), dtype, fill, g)
        return base[1]
    if layout == "strided" and len(shape) >= 1:
        base = _values((*shape[:-1], shape[-1] * 2), dtype, fill, g)
        return base[..., ::2]
    if layout == "channels_last" and len(shape) == 4:
        return _values(shape, dtype, fill, g).contiguous(memory_format=torch.channels_last)
    if layout == "expanded" and len(shape) >= 1:
        dim = max(range(len(shape)), key=lambda d: shape[d])
        small = (*shape[:dim], 1, *shape[dim + 1 :])
        return _values(small, dtype, fill, g).expand(shape)
    return _values(shape, dtype, fill, g)


def make_inputs(
    specs: list[Spec], seed: int, call_set: int, requires_grad: tuple[int, ...] = ()
) -> list[torch.Tensor]:
    """Every input of a program for one call; ``requires_grad`` inputs become leaves that do."""
    out = []
    for i, spec in enumerate(specs):
        t = make_input(spec, seed, i, call_set)
        if i in requires_grad:
            t = t.detach().requires_grad_(True)
        out.append(t)
    return out
