"""The per-call check that a graph compiled for static sizes gets inputs like its examples.

A compiled graph assumes each tensor input's dtype, device, sizes and strides, and bakes
non-tensor inputs into its code; a call with anything else runs the graph as it came. The
check runs on every call, so it is generated as one expression per graph: comparing each
input's attributes against constants costs about half of building and comparing a key tuple
per input (0.6 ms per call for the 211 inputs of mobilenet_v3_small under torch.compile,
where the parameters are inputs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["meta_key", "static_input_check"]


def meta_key(x: object) -> object:
    """What a compiled graph assumes of one input."""
    if isinstance(x, torch.Tensor):
        return (x.dtype, x.device, tuple(x.shape), tuple(x.stride()))
    if isinstance(x, torch.SymInt | torch.SymFloat | torch.SymBool):
        return (type(x), "symbolic")  # hashing would guard on its value
    # non-tensor inputs are baked into the generated code: the value itself must match
    try:
        hash(x)
    except TypeError:
        return (type(x), id(x))
    return (type(x), x)


def _strides_agree(shape: Sequence[int], strides: Sequence[int], expected: Sequence[int]) -> bool:
    """Equal strides on every dim of more than one element: a dim of one element addresses
    nothing beyond element 0, whatever its stride."""
    return all(n <= 1 or a == b for n, a, b in zip(shape, strides, expected, strict=True))


def static_input_check(example_inputs: Sequence[object]) -> Callable[[Sequence[Any]], bool]:
    """``check(args)``: True when ``args`` match ``example_inputs`` as ``meta_key`` says, but
    for the strides of dims of one element, which may be anything: a backward's saved
    activation of shape (N, C, 1, 1) comes from the forward's aten call with strides that
    differ from aot's meta there (resnet18's pooled layer4 output), and refusing it ran the
    whole backward eagerly on every call."""
    ns: dict[str, Any] = {"_Tensor": torch.Tensor, "_key": meta_key, "_agree": _strides_agree}
    terms = [f"len(args) == {len(example_inputs)}"]
    for k, x in enumerate(example_inputs):
        a = f"args[{k}]"
        if isinstance(x, torch.Tensor):
            ns[f"_s{k}"], ns[f"_t{k}"] = tuple(x.shape), tuple(x.stride())
            ns[f"_d{k}"], ns[f"_v{k}"] = x.dtype, x.device
            strides = f"{a}.stride() == _t{k}"
            if any(n <= 1 for n in x.shape):  # the exact compare first: the common case
                strides = f"({strides} or _agree(_s{k}, {a}.stride(), _t{k}))"
            # ``is_cpu`` is a flag read; ``device ==`` builds a device object (~0.3 us a tensor,
            # 80 saved tensors a call in a transformer's backward)
            device = f"{a}.is_cpu" if x.device.type == "cpu" else f"{a}.device == _v{k}"
            terms.append(
                f"isinstance({a}, _Tensor) and {a}.dtype is _d{k} and {a}.shape == _s{k}"
                f" and {strides} and {device}"
            )
        elif isinstance(x, torch.SymFloat):
            # a float known only at run time: read by the code, any value is fine
            terms.append(f"type({a}) is float")
        else:
            ns[f"_k{k}"] = meta_key(x)
            terms.append(f"_key({a}) == _k{k}")
    body = " and\n        ".join(f"({t})" for t in terms)
    source = f"def check(args):\n    return bool(\n        {body}\n    )\n"
    exec(compile(source, "<inductor_lite input check>", "exec"), ns)
    check = ns["check"]
    assert callable(check)
    return check  # type: ignore[no-any-return]
