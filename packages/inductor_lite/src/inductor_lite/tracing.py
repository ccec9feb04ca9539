"""Reaching aten: a torch-level graph traced to a functional aten graph for inference."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch._decomp import core_aten_decompositions, get_decompositions
from torch.fx import traceback as fx_traceback
from torch.fx.experimental.proxy_tensor import make_fx

from .errors import UnsupportedGraph

__all__ = ["decomposition_table", "extra_decompositions", "kept_as_aten", "trace_to_aten"]

aten = torch.ops.aten


def decomposition_table() -> dict[Any, Any]:
    """Core aten decompositions plus the composite ops we prefer as their pieces."""
    table: dict[Any, Any] = dict(core_aten_decompositions())
    table.update(extra_decompositions())
    for op in kept_as_aten():
        table.pop(op, None)
    return table


def kept_as_aten() -> tuple[Any, ...]:
    """Core ops whose core decomposition we do not take: aten's kernel beats its pieces.

    CPU flash attention: its decomposition (bmm, a softmax that zeroes fully masked rows
    with an ``any`` and a ``full_like``, bmm) took 490 us where aten's fused kernel takes
    210 us (1x4x128x64, one thread); it stays one aten call.
    """
    return (aten._scaled_dot_product_flash_attention_for_cpu.default,)


def extra_decompositions() -> dict[Any, Any]:
    """Ops that are core aten but that we lower better as their pieces (softmax, norms)."""
    table = dict(
        get_decompositions(
            [
                aten._softmax,
                aten._log_softmax,
                aten.native_layer_norm,
                aten.native_batch_norm,
                aten._native_batch_norm_legit_no_training,
                aten._native_batch_norm_legit,
                aten._native_batch_norm_legit_functional,
                aten.silu,
                aten.addcmul,
                aten.hardswish,
                aten.hardsigmoid,
                aten.leaky_relu,
                aten.mse_loss,
            ]
        )
    )
    for op in _BATCH_NORMS:
        table[op] = _float_batch_norm_stats(table[op])
    return table


_BATCH_NORMS = (
    aten.native_batch_norm.default,
    aten._native_batch_norm_legit_no_training.default,
    aten._native_batch_norm_legit.default,
    aten._native_batch_norm_legit.no_stats,
    aten._native_batch_norm_legit_functional.default,
)
_REDUCED = (torch.float16, torch.bfloat16)


def _float_batch_norm_stats(decomposition: Callable[..., Any]) -> Callable[..., Any]:
    """``decomposition`` keeping eager's float32 saved mean and inverse std for a reduced input.

    Eager's CPU kernel runs a float16/bfloat16 input with float32 weight, bias and running
    stats as "mixed type": it saves the mean and inverse std in float32, and the backward
    uses those. torch's decomposition rounds them to the input's dtype on CPU, so the backward
    graph rebuilt ``x_hat`` from a float16 mean and inverse std: the weight gradient was off
    by 0.6% (3.0686 where eager gives 3.0880). Run on the input upcast to float32, the
    decomposition computes the same values (it promotes the input to float32 anyway) and
    returns float32 statistics; only the output goes back to the input's dtype.
    """

    def decomposed(x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        params = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        if x.dtype not in _REDUCED or not params:
            return decomposition(x, *args, **kwargs)
        if any(p.dtype != torch.float32 for p in params):
            return decomposition(x, *args, **kwargs)
        out, *rest = decomposition(x.float(), *args, **kwargs)
        return (out.to(x.dtype), *rest)

    return decomposed


def trace_to_aten(
    gm: torch.fx.GraphModule, example_inputs: Sequence[object]
) -> tuple[torch.fx.GraphModule, pytree.TreeSpec]:
    """Trace ``gm`` to aten under no_grad with fake tensors; returns the graph (flat outputs)
    and the tree structure of ``gm``'s outputs."""
    for x in example_inputs:
        if isinstance(x, torch.SymInt | torch.SymFloat | torch.SymBool):
            raise UnsupportedGraph("symbolic scalar inputs are not supported")
    spec: list[pytree.TreeSpec] = []

    # Node by node with each node's meta current (plain codegen only): make_fx then copies
    # the user's source line (meta["stack_trace"]) into the aten nodes it records, which
    # origins.py prints above the generated code.
    plain = type(gm.graph._codegen) is torch.fx.graph.CodeGen

    def flat_fn(*args: Any) -> list[Any]:
        out = torch.fx.Interpreter(gm).run(*args) if plain else gm(*args)
        flat, s = pytree.tree_flatten(out)
        spec.append(s)
        return flat

    with torch.no_grad(), fx_traceback.preserve_node_meta():
        traced = make_fx(
            # mutation of graph-local tensors becomes functional ops; mutation of an input
            # stays a final copy_ into it, which the lowering turns into a write of the input
            torch.func.functionalize(flat_fn, remove="mutations"),
            decomposition_table=decomposition_table(),
            tracing_mode="fake",
            _allow_non_fake_inputs=True,
        )(*example_inputs)
    return traced, spec[-1]
