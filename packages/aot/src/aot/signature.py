"""Input signatures: which compiled graphs a call's inputs may run.

A signature is the grad mode plus, per flat input, its key (``leaf_key``): a tensor's shape,
strides, dtype, device and requires_grad (with dynamic shapes only its rank instead of its
sizes), another input's value. Building that key tuple on every call cost about 1.5 us per
input (a 211-input mobilenet graph under torch.compile, where the parameters are inputs:
~0.3 ms per call). ``signature_check`` instead generates, once per compiled signature, one
expression that compares the call's inputs with the signature's constants, in the order
that fails fastest, so the common call (the signature of the previous call) builds nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch

from aot.analysis import has_torch_overrides
from aot.errors import AotUnsupportedError

__all__ = ["leaf_key", "overrides", "signature_check"]

_OVERRIDES_BY_TYPE: dict[type, bool] = {}


def overrides(value: torch.Tensor) -> bool:
    """``has_torch_overrides``, cached per type (parameters pass here on every call)."""
    cls = type(value)
    known = _OVERRIDES_BY_TYPE.get(cls)
    if known is None:
        known = _OVERRIDES_BY_TYPE[cls] = has_torch_overrides(value)
    return known


def leaf_key(value: object, dynamic: bool) -> Hashable:
    """One input's part of the signature."""
    if isinstance(value, torch.Tensor):
        if type(value) is not torch.Tensor and overrides(value):
            # refused by the compile; reading its sizes here would run the subclass's
            # __torch_function__ (a user hook eager never runs for this)
            return ("overrides", type(value))
        if dynamic:  # sizes are symbols in the graphs; whoever made them guards the shapes
            return ("T", value.dim(), value.dtype, value.device.type, value.device.index,
                    bool(value.requires_grad))
        return (
            "T", tuple(value.shape), tuple(value.stride()), value.dtype, value.device.type,
            value.device.index, bool(value.requires_grad),
        )
    if dynamic and isinstance(value, int | float | bool | torch.SymInt | torch.SymFloat):
        return ("N", float if isinstance(value, float | torch.SymFloat) else int)
    if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
        raise AotUnsupportedError(
            "symbolic inputs reached a function compiled for static shapes; use "
            "aot_module_simplified with the graph's symbolic example values"
        )
    try:
        hash(value)
    except TypeError:
        return ("id", id(value))
    return ("V", type(value), value)


def signature_check(
    flat_args: Sequence[object], dynamic: bool, grad: bool
) -> Callable[[Sequence[object]], bool]:
    """``check(args)``: True exactly when ``args`` (under the current grad mode) have the
    signature of ``flat_args`` under grad mode ``grad``; may be stricter (a tensor must have
    the exact type seen here, so a subclass with overrides never reaches an attribute read),
    never looser. Call it with torch-function subclasses disabled, as the key is read."""
    ns: dict[str, Any] = {"_grad": torch.is_grad_enabled, "_key": leaf_key}
    terms = [f"_grad() is {grad}", f"len(args) == {len(flat_args)}"]
    tensor_terms = []
    for k, x in enumerate(flat_args):
        a = f"args[{k}]"
        if isinstance(x, torch.Tensor) and not (type(x) is not torch.Tensor and overrides(x)):
            ns[f"_c{k}"], ns[f"_d{k}"] = type(x), x.dtype
            parts = [f"type({a}) is _c{k}"]
            if dynamic:
                parts.append(f"{a}.dim() == {x.dim()}")
            else:
                ns[f"_s{k}"], ns[f"_t{k}"] = tuple(x.shape), tuple(x.stride())
                parts += [f"{a}.shape == _s{k}", f"{a}.stride() == _t{k}"]
            parts.append(f"{a}.dtype is _d{k}")
            if x.device.type == "cpu":  # a CPU tensor's device never has an index
                parts.append(f"{a}.is_cpu")
            else:
                ns[f"_v{k}"] = x.device
                parts.append(f"{a}.device == _v{k}")
            parts.append(f"{a}.requires_grad is {bool(x.requires_grad)}")
            tensor_terms.append(" and ".join(parts))
        else:
            ns[f"_k{k}"] = leaf_key(x, dynamic)
            terms.append(f"_key({a}, {dynamic}) == _k{k}")
    body = " and\n        ".join(f"({t})" for t in [*terms, *tensor_terms])
    source = f"def check(args):\n    return bool(\n        {body}\n    )\n"
    exec(compile(source, "<aot signature check>", "exec"), ns)
    check = ns["check"]
    assert callable(check)
    return check  # type: ignore[no-any-return]
