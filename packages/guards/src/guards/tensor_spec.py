"""What TENSOR_MATCH records about a tensor, and the exact stride rule for dynamic dims.

Stride rule (``stride_rule``), applied per dimension ``i`` of the example tensor:

* Sizes: a static dim is checked for equality; a dynamic dim only for ``size >= 2``.  A dim
  asked to be dynamic whose example size is 0 or 1 is kept static (0/1 specialisation, as
  ShapeEnv does), so the guard always passes on the example itself.
* Strides: dims are visited from the smallest stride to the largest (ties: the higher dim
  first, the usual contiguous order).  If the example's ``stride[i] == stride[j] * size[j]``
  for an already visited dim ``j`` whose size is dynamic or whose stride is itself a
  relation, ``stride[i]`` is checked as that relation on the actual tensor
  (``stride[i] == stride[j] * size[j]``); otherwise it is checked as the exact integer.

So a contiguous ``(s0, s1, 4)`` tensor checks ``stride == (stride[1]*size[1], 4, 1)``, a
contiguous ``(s0, 3)`` tensor checks ``stride == (3, 1)`` exactly, and a tensor whose strides
do not follow its (dynamic) sizes keeps exact strides, which then fail when sizes change --
a recompile, never a wrong result.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, TypeAlias

import attrs
import torch

from guards.errors import UnsupportedGuardValue

__all__ = ["TensorSpec", "StrideRel", "StrideExpr", "tensor_spec", "stride_rule"]


@attrs.frozen
class StrideRel:
    """``stride[dim] * size[dim]`` of the same tensor."""

    dim: int

    def __str__(self) -> str:
        return f"stride[{self.dim}]*size[{self.dim}]"


StrideExpr: TypeAlias = int | StrideRel


@attrs.frozen
class TensorSpec:
    """The checked properties of one tensor.  ``sizes[i] is None`` marks a dynamic dim."""

    cls: type
    dtype: Any  # torch.dtype
    device: Any  # torch.device
    device_index: int  # tensor.get_device(): -1 on CPU/meta, the index on accelerators
    requires_grad: bool
    dispatch_keys: Any = attrs.field(eq=False)  # torch.DispatchKeySet (unhashable)
    dispatch_keys_raw: int
    sizes: tuple[int | None, ...]
    #: None for layouts without strides (sparse); the dispatch keys tell layouts apart.
    strides: tuple[StrideExpr, ...] | None
    layout: Any = torch.strided  # torch.layout

    @property
    def ndim(self) -> int:
        return len(self.sizes)

    @property
    def dynamic_dims(self) -> frozenset[int]:
        return frozenset(i for i, s in enumerate(self.sizes) if s is None)


def stride_rule(
    sizes: tuple[int, ...], strides: tuple[int, ...], dynamic: frozenset[int]
) -> tuple[StrideExpr, ...]:
    """Apply the module's stride rule; see the module docstring."""
    order = sorted(range(len(sizes)), key=lambda d: (strides[d], -d))
    out: list[StrideExpr] = list(strides)
    symbolic: set[int] = set()  # dims whose size or stride varies with dynamic sizes
    visited: list[int] = []
    for i in order:
        for j in visited:
            if j in symbolic and strides[i] == strides[j] * sizes[j]:
                out[i] = StrideRel(j)
                symbolic.add(i)
                break
        if i in dynamic:
            symbolic.add(i)
        visited.append(i)
    return tuple(out)


def plain_torch_function(cls: type) -> bool:
    """True when reading attributes of a ``cls`` tensor runs no user ``__torch_function__``."""
    tf = getattr(cls, "__torch_function__", None)
    func = getattr(tf, "__func__", tf)
    default = torch.Tensor.__torch_function__.__func__  # type: ignore[attr-defined]
    return func is default or func is torch._C._disabled_torch_function_impl


def tensor_spec(tensor: torch.Tensor, dynamic_dims: Collection[int] = ()) -> TensorSpec:
    """Record ``tensor``'s checked properties; ``dynamic_dims`` may be negative (from the end).

    Read as the TensorImpl holds them: a subclass's ``__torch_function__`` does not run (the
    checks read them so too). Raises UnsupportedGuardValue for tensors without sizes (strided
    nested tensors).
    """
    with torch._C.DisableTorchFunctionSubclass():
        return _tensor_spec(tensor, dynamic_dims)


def _tensor_spec(tensor: torch.Tensor, dynamic_dims: Collection[int]) -> TensorSpec:
    ndim = tensor.dim()
    try:
        sizes = tuple(int(s) for s in tensor.size())
    except RuntimeError as exc:
        raise UnsupportedGuardValue(f"TENSOR_MATCH on a tensor without sizes: {exc}") from exc
    strided = tensor.layout == torch.strided
    strides = tuple(int(s) for s in tensor.stride()) if strided else ()
    dynamic = frozenset(
        d % ndim for d in dynamic_dims if -ndim <= d < ndim and sizes[d % ndim] >= 2
    )
    keys = torch._C._dispatch_keys(tensor)
    return TensorSpec(
        cls=type(tensor),
        dtype=tensor.dtype,
        device=tensor.device,
        device_index=tensor.get_device(),
        requires_grad=tensor.requires_grad,
        dispatch_keys=keys,
        dispatch_keys_raw=keys.raw_repr(),
        sizes=tuple(None if i in dynamic else s for i, s in enumerate(sizes)),
        strides=stride_rule(sizes, strides, dynamic) if strided else None,
        layout=tensor.layout,
    )
