"""Training steps: forward, loss, backward and a plain SGD update, all in the compiled function."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .base import TRAINING, Instance, Tolerance, Workload, randn
from .models import make_block, make_mlp

LEARNING_RATE = 1e-3


def _training_instance(model: nn.Module, x: torch.Tensor, target: torch.Tensor) -> Instance:
    """A step function over ``model``; after it, each parameter's grad and new value are checked."""
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]

    def step(inp: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        for p in params:
            p.grad = None
        loss = F.mse_loss(model(inp), tgt)
        loss.backward()  # type: ignore[no-untyped-call]
        with torch.no_grad():
            for p in params:
                p.sub_(LEARNING_RATE * p.grad)  # type: ignore[operator]
        return loss.detach()

    def state() -> list[torch.Tensor]:
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        return [*grads, *(p.detach() for p in params)]

    return Instance(step, (x, target), state)


def _build_mlp_train(device: torch.device, quick: bool) -> Instance:
    model, x = make_mlp(device, quick)
    target = randn(tuple(x.shape), device, 12)
    return _training_instance(model, x, target)


def _build_block_train(device: torch.device, quick: bool) -> Instance:
    model, x = make_block(device, quick)
    target = randn(tuple(x.shape), device, 22)
    return _training_instance(model, x, target)


MLP_TRAIN = Workload(
    name="mlp_train",
    kind=TRAINING,
    description="MLP (width 1024, batch 64): forward, MSE loss, backward, SGD update",
    build=_build_mlp_train,
    tolerance=Tolerance(rtol=1e-3, atol=1e-5),
)

TRANSFORMER_BLOCK_TRAIN = Workload(
    name="transformer_block_train",
    kind=TRAINING,
    description=("transformer block (d=256, seq 128, batch 8): forward, MSE loss, backward, "
                 "SGD update"),
    build=_build_block_train,
    tolerance=Tolerance(rtol=1e-3, atol=1e-5),
)
