"""Buffers a C++ wrapper allocates once and keeps between calls.

A CPU graph's intermediate buffers that only its own kernels and aten calls touch (never
returned, never a guard's or an input write's value, never read by an aten call whose result
may alias its arguments) need not be allocated per call: each costs ``torch.empty_strided``
(~1-5 us, and page faults for a large one) and a ``data_ptr()`` per kernel argument. Kept
buffers are made when the wrapper is built; the wrapper binds them by name and passes their
data pointers as constants. Dead kept buffers are reused only by buffers that may be kept
themselves, so no result the caller receives ever shares their memory.

A call that finds the buffers in use (the same graph called from two threads at once, or
from inside itself) runs the plain wrapper instead, which allocates as before: the kept
wrapper holds a non-blocking lock for its whole call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from .ir import BufferSpec
from .symbolic import Size

__all__ = ["KeptBuffers", "guarded_source"]


class KeptBuffers:
    """The kept buffers of one wrapper: their tensors and data pointers, bound in ``ns``."""

    def __init__(
        self,
        ns: dict[str, object],
        device: torch.device,
        excluded: Iterable[str],
        *,
        limit: int,
    ) -> None:
        """``limit``: kept bytes at most (InductorConfig.kept_buffer_bytes; 0: none kept),
        beyond which buffers are allocated per call as before."""
        self.ns = ns
        self.device = device
        self.excluded = frozenset(excluded)
        self.enabled = limit > 0 and device.type == "cpu"
        self.limit = limit
        self.used = 0
        self.tensors: dict[str, torch.Tensor] = {}  # buffer name -> its kept tensor
        self.ptrs: dict[str, str] = {}  # buffer name -> global holding its data pointer
        # dead kept buffers by pool key: taken only by buffers that are kept too
        self.pool: dict[tuple[object, ...], list[str]] = {}
        # (buffer, sizes, strides, offset) -> the global holding that view of a kept buffer
        self.views: dict[tuple[object, ...], str] = {}

    def eligible(self, spec: BufferSpec) -> bool:
        """May ``spec`` live in memory kept between calls?"""
        return (
            self.enabled
            and spec.name not in self.excluded
            and all(type(s) is int for s in (*spec.sizes, *spec.strides))
        )

    def fits(self, spec: BufferSpec) -> bool:
        return self.eligible(spec) and self.used + _nbytes(spec) <= self.limit

    def keep(self, spec: BufferSpec, old: str | None = None) -> str:
        """The global naming ``spec``'s kept tensor: new memory, or ``old``'s kept memory."""
        sizes = tuple(int(s) for s in spec.sizes)
        strides = tuple(int(s) for s in spec.strides)
        if old is None:
            self.used += _nbytes(spec)
            t = torch.empty_strided(sizes, strides, dtype=spec.dtype, device=self.device)
        else:
            base = self.tensors[old]
            t = (
                base
                if (base.shape, base.stride()) == (sizes, strides)
                else (base.as_strided(sizes, strides, base.storage_offset()))
            )
        k = len(self.tensors)
        self.tensors[spec.name] = t
        self.ns[f"_keep{k}"] = t
        self.ns[f"_pkeep{k}"] = t.data_ptr()
        self.ptrs[spec.name] = f"_pkeep{k}"
        return f"_keep{k}"

    def view(
        self, name: str, sizes: Sequence[Size], strides: Sequence[Size], offset: Size
    ) -> str | None:
        """The global holding a view of kept buffer ``name`` (static layout), made once; None
        for a buffer that is not kept."""
        base = self.tensors.get(name)
        if base is None or not all(type(s) is int for s in (*sizes, *strides, offset)):
            return None
        key = (name, tuple(sizes), tuple(strides), offset)
        if key not in self.views:
            self.views[key] = glob = f"_kview{len(self.views)}"
            self.ns[glob] = base.as_strided(sizes, strides, base.storage_offset() + int(offset))
        return self.views[key]

    def ptr(self, name: str) -> str:
        """The data pointer argument of buffer ``name`` in a kernel call."""
        return self.ptrs.get(name, f"{name}.data_ptr()")


def _nbytes(spec: BufferSpec) -> int:
    dims = list(zip(spec.sizes, spec.strides, strict=True))
    extent = 1 + sum((int(n) - 1) * abs(int(s)) for n, s in dims)
    if any(int(n) == 0 for n, _ in dims):
        extent = 0
    return extent * torch.empty((), dtype=spec.dtype).element_size()


def guarded_source(lines: list[str], ns: dict[str, Any], plain: Callable[..., Any]) -> list[str]:
    """``call``'s lines run under the kept buffers' lock, ``plain`` when they are in use."""
    import threading

    lock = threading.Lock()
    ns["_kept_acquire"] = lock.acquire
    ns["_kept_release"] = lock.release
    ns["_plain"] = plain
    head, body = lines[0], lines[1:]
    return [
        head,
        "    if not _kept_acquire(False):  # kept buffers in use: the allocating wrapper",
        "        return _plain(args)",
        "    try:",
        *(f"    {line}" for line in body),
        "    finally:",
        "        _kept_release()",
    ]
