"""Activation checkpointing of a body with real dropout: recomputed, with the forward's mask.

Eager's ``checkpoint`` restores the generator state before recomputing, so the backward's
dropout draws the forward's mask. Compiled, the body is one checkpoint node: the eager backend
runs torch's checkpoint keeping the RNG state, and aot saves the generator state before each
checkpointed random op and replays it in the backward's recomputation (``aot.rng_replay``), so
the forward saves the region's inputs and a 5 KB state instead of the activations and masks.
Gradients are compared with eager under the same seed, and so is the next random number drawn
after the backward (the replay leaves the generator where eager leaves it).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import aot
import compile_api
import inductor_lite


class DropoutBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin1 = torch.nn.Linear(16, 32)
        self.lin2 = torch.nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.dropout(torch.relu(self.lin1(x)), 0.3, training=True)
        return torch.nn.functional.dropout(self.lin2(h), 0.2, training=True).sin()


class Model(torch.nn.Module):
    """Two checkpointed blocks with dropout, and a dropout outside them."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList([DropoutBlock(), DropoutBlock()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + checkpoint(block, x, use_reentrant=False)
        return torch.nn.functional.dropout(x, 0.1, training=True).square().mean()


def _strict_inductor(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
    return inductor_lite.compile_fx(
        gm, example_inputs, config=inductor_lite.InductorConfig(fallback="raise")
    )


def _train_step(model: Callable[[torch.Tensor], torch.Tensor], params: Any) -> list[torch.Tensor]:
    torch.manual_seed(11)
    x = torch.randn(8, 16, requires_grad=True)
    loss = model(x)
    grads = torch.autograd.grad(loss, (x, *params))
    after = torch.rand(3)  # where the generator stands after the backward
    return [loss.detach(), *grads, after]


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_checkpointed_dropout_recomputes_the_forward_mask_with_eager_gradients(
    backend: str,
) -> None:
    compile_api.config.suppress_errors = False
    model = Model()
    params = list(model.parameters())
    want = _train_step(model, params)
    compiled = compile_api.compile(
        model, backend=_strict_inductor if backend == "inductor" else backend
    )
    for _ in range(2):  # the second call runs the cached graphs
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # no inductor_lite fallback
            got = _train_step(compiled, params)
        torch.testing.assert_close(got, want)


def test_checkpointed_dropout_saves_the_generator_state_not_the_activations() -> None:
    compile_api.config.suppress_errors = False
    saved: list[list[torch.fx.Node]] = []

    def fw(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        (outputs,) = [n.args[0] for n in gm.graph.nodes if n.op == "output"]
        saved.append([o for o in outputs[1:] if isinstance(o, torch.fx.Node)])
        return gm.forward

    def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        return aot.aot_module_simplified(gm, example_inputs, fw, aot.eager_compiler)

    block = DropoutBlock()

    def f(x: torch.Tensor, use_checkpoint: bool) -> torch.Tensor:
        h = checkpoint(block, x, use_reentrant=False) if use_checkpoint else block(x)
        return h.sum()

    def saved_kinds(use_checkpoint: bool) -> tuple[int, int, int]:
        saved.clear()
        compile_api.reset()
        x = torch.randn(8, 16, requires_grad=True)
        torch.manual_seed(2)
        got = compile_api.compile(f, backend=backend)(x, use_checkpoint)
        (got_grad,) = torch.autograd.grad(got, x)
        torch.manual_seed(2)
        want = f(x, use_checkpoint)
        (want_grad,) = torch.autograd.grad(want, x)
        torch.testing.assert_close((got, got_grad), (want, want_grad))
        (nodes,) = saved
        vals = [n.meta["val"] for n in nodes]
        masks = sum(v.dtype == torch.bool for v in vals)
        states = sum(v.dtype == torch.uint8 for v in vals)
        activations = sum(v.dtype == torch.float32 and v.shape[0] == 8 for v in vals)
        return masks, states, activations

    masks, states, activations = saved_kinds(False)
    assert masks == 2 and states == 0 and activations >= 2  # masks and activations kept
    masks, states, activations = saved_kinds(True)
    # one generator state per dropout; the region's input x (8 x 16) is the only activation
    assert (masks, states, activations) == (0, 2, 1)
