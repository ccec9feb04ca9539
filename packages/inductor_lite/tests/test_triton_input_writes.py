"""Inputs written in place by Triton kernels (interpreted on CPU when there is no GPU).

The autotuner launches a kernel several times to time block sizes; a kernel that updates
its own input (p = p - lr * g) must still be applied exactly once.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pytest
import torch

# the interpreter must be chosen before triton is first imported (see test_triton.py)
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")
DEV = "cuda" if torch.cuda.is_available() else "cpu"

import aot  # noqa: E402
from inductor_lite import CompiledGraph, InductorConfig, compile_aten_graph  # noqa: E402

LR = 0.1


def _momentum_sgd(p: torch.Tensor, g: torch.Tensor, buf: torch.Tensor, b: torch.Tensor,
                  gb: torch.Tensor) -> None:
    with torch.no_grad():
        buf.mul_(0.9).add_(g)
        p.sub_(LR * buf)
        b.sub_(LR * gb)


@pytest.mark.parametrize("in_place", [True, False], ids=["in-place", "copy"])
def test_triton_update_of_inputs_is_applied_once_despite_autotuning(
    config: InductorConfig, in_place: bool
) -> None:
    cfg = dataclasses.replace(
        config, codegen="triton", triton_autotune_cache={}, write_inputs_in_place=in_place
    )
    compiled_graphs: list[Any] = []

    def compiler(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        c = compile_aten_graph(gm, example_inputs, config=cfg)
        compiled_graphs.append(c)
        return c

    fn = aot.aot_function(_momentum_sgd, compiler, keep_input_mutations=True)
    p = torch.randn(96, 40, device=DEV, requires_grad=True)
    b = torch.randn(40, device=DEV, requires_grad=True)
    buf = torch.zeros(96, 40, device=DEV)
    p_e, b_e = p.detach().clone(), b.detach().clone()
    buf_e = buf.clone()
    for _ in range(2):
        g, gb = torch.randn(96, 40, device=DEV), torch.randn(40, device=DEV)
        fn(p, g, buf, b, gb)
        _momentum_sgd(p_e, g, buf_e, b_e, gb)
        torch.testing.assert_close(p.detach(), p_e)
        torch.testing.assert_close(b.detach(), b_e)
        torch.testing.assert_close(buf, buf_e)
    (c,) = compiled_graphs
    assert isinstance(c, CompiledGraph)
    assert "@triton.jit" in c.kernel_source
    if in_place:
        assert "into the input" in c.wrapper_source
    else:
        assert "into the input" not in c.wrapper_source


def test_autotuning_a_kernel_that_updates_its_input_leaves_one_update(
    config: InductorConfig,
) -> None:
    # straight to the wrapper storing into the inputs, before any call tuned the kernels:
    # every timing launch rewrites p, and what it wrote is put back before the real launch
    cfg = dataclasses.replace(config, codegen="triton", triton_autotune_cache={})
    compiled_graphs: list[Any] = []

    def compiler(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        compiled_graphs.append(compile_aten_graph(gm, example_inputs, config=cfg))
        return compiled_graphs[-1]

    # compiling needs one call; its inputs are thrown away
    fn = aot.aot_function(_momentum_sgd, compiler, keep_input_mutations=True)
    shapes = [(64, 8), (64, 8), (64, 8), (8,), (8,)]
    fn(*[torch.randn(*s, device=DEV) for s in shapes])
    (c,) = compiled_graphs
    assert isinstance(c, CompiledGraph)
    fresh = compile_aten_graph(c.gm, [torch.randn(*s, device=DEV) for s in shapes],
                               config=dataclasses.replace(cfg, triton_autotune_cache={}))
    assert isinstance(fresh, CompiledGraph)
    args = [torch.randn(*s, device=DEV) for s in shapes]
    want = [a.clone() for a in args]
    _momentum_sgd(*want)
    fresh.run.then(args)  # type: ignore[attr-defined]
    for got, exp in zip(args, want, strict=True):
        torch.testing.assert_close(got, exp)


# a transformer block's parameter shapes: updates of several row counts, so several kernels,
# and buffers of one kernel that the wrapper could hand to a later one
_BLOCK_SHAPES = [(256,), (256,), (768, 256), (768,), (256, 256), (256,), (256,), (256,),
                 (1024, 256), (1024,), (256, 1024), (256,)]


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
@pytest.mark.parametrize("in_place", [True, False], ids=["in-place", "copy"])
def test_values_copied_into_inputs_at_the_end_are_not_reused_before(
    config: InductorConfig, codegen: str, in_place: bool
) -> None:
    # The copying wrapper (every call with write_inputs_in_place=False; Triton's first call)
    # copies each new value into its parameter at the end: the wrapper handed a value's buffer
    # to a later kernel before that copy, and parameters got other parameters' updates (wrong
    # results of transformer_block_train on the H100)
    if codegen == "cpp" and DEV != "cpu":
        pytest.skip("C++ kernels take CPU tensors")
    cfg = dataclasses.replace(
        config, codegen=codegen, triton_autotune_cache={}, write_inputs_in_place=in_place
    )
    params = [torch.randn(s, device=DEV, requires_grad=True) for s in _BLOCK_SHAPES]
    twins = [p.detach().clone() for p in params]

    def update(*ps_and_gs: torch.Tensor) -> None:
        with torch.no_grad():
            for p, g in zip(ps_and_gs[: len(params)], ps_and_gs[len(params):], strict=True):
                p.sub_(LR * g)

    fn = aot.aot_function(
        update, lambda gm, ex: compile_aten_graph(gm, ex, config=cfg), keep_input_mutations=True
    )
    for _ in range(2):
        grads = [torch.randn(s, device=DEV) for s in _BLOCK_SHAPES]
        fn(*params, *grads)
        for t, g in zip(twins, grads, strict=True):
            t.sub_(LR * g)
        for p, t in zip(params, twins, strict=True):
            torch.testing.assert_close(p.detach(), t)
