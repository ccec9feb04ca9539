"""Bytes a compiled training step saves for backward, with and without activation checkpointing
of layers that hold dropout (aot's RNG replay, issue 19). Checks gradients against eager under
the same seed. Run: ``python benchmarks/checkpoint_dropout_memory.py``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

import aot
import compile_api


class Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(256, 1024)
        self.b = torch.nn.Linear(1024, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.dropout(torch.nn.functional.gelu(self.a(x)), 0.1, training=True)
        return x + torch.nn.functional.dropout(self.b(h), 0.1, training=True)


class Model(torch.nn.Module):
    def __init__(self, use_checkpoint: bool) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(Layer() for _ in range(4))
        self.use_checkpoint = use_checkpoint

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = checkpoint(layer, x, use_reentrant=False) if self.use_checkpoint else layer(x)
        return x.square().mean()


def measure(use_checkpoint: bool) -> tuple[int, bool]:
    stats: list[aot.PartitionStats] = []

    def fw(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        stats.append(aot.partition_stats(gm, 1))
        return gm.forward

    def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        return aot.aot_module_simplified(gm, example_inputs, fw, aot.eager_compiler)

    compile_api.reset()
    torch.manual_seed(0)
    model = Model(use_checkpoint)
    x = torch.randn(64, 256)
    compiled = compile_api.compile(model, backend=backend, fullgraph=True)
    torch.manual_seed(1)
    compiled(x).backward()
    got = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad()
    torch.manual_seed(1)
    model(x).backward()
    want = [p.grad for p in model.parameters() if p.grad is not None]
    same = all(torch.allclose(g, w) for g, w in zip(got, want, strict=True))
    return stats[0].saved_bytes, same


def main() -> None:
    params = sum(p.numel() * p.element_size() for p in Model(False).parameters())
    for use_checkpoint in (False, True):
        saved, same = measure(use_checkpoint)
        print(
            f"checkpoint={use_checkpoint}: saved for backward {saved / 2**20:.2f} MiB "
            f"(parameters {params / 2**20:.2f} MiB), gradients equal eager: {same}"
        )


if __name__ == "__main__":
    main()
