"""inductor_lite on CUDA (Triton kernels): correctness and speed beside eager and inductor.

    PYTHONPATH=packages/inductor_lite/src:packages/aot/src python benchmarks/inductor_cuda.py

Each workload is compiled through ``torch.compile(backend=compile_fx)``, compared with
eager, then timed interleaved with eager and torch's inductor (medians, CUDA-synchronised).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from inductor_lite import compile_fx


class Block(nn.Module):
    def __init__(self, d: int = 512, heads: int = 8) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
        att = torch.softmax(q @ k.transpose(-2, -1) / (d // h) ** 0.5, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


def chain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(torch.relu(x * 2.0 + y) - 0.5) * x + 1.0


def ln_softmax(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.softmax(F.layer_norm(x, (x.shape[-1],), w, b), dim=-1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.LayerNorm(4096), nn.Linear(4096, 1024))
    mlp = mlp.to(dev)
    block = Block().to(dev)
    train_mlp = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).to(dev)
    work: dict[str, tuple[Callable[..., Any], list[torch.Tensor], bool]] = {
        "pointwise_chain_16384x1024": (
            chain,
            [torch.randn(16384, 1024, device=dev), torch.randn(1024, device=dev)],
            False,
        ),
        "layer_norm_softmax_16384x1024": (
            ln_softmax,
            [
                torch.randn(16384, 1024, device=dev),
                torch.randn(1024, device=dev),
                torch.randn(1024, device=dev),
            ],
            False,
        ),
        "layer_norm_softmax_1024x8192 (looped rows)": (
            ln_softmax,
            [
                torch.randn(1024, 8192, device=dev),
                torch.randn(8192, device=dev),
                torch.randn(8192, device=dev),
            ],
            False,
        ),
        "mlp_b2048": (mlp.eval(), [torch.randn(2048, 1024, device=dev)], False),
        "transformer_block_b16_t256_d512": (
            block.eval(),
            [torch.randn(16, 256, 512, device=dev)],
            False,
        ),
        "mlp_training_step_b2048": (train_mlp, [torch.randn(2048, 1024, device=dev)], True),
    }
    print(
        f"torch {torch.__version__}, {torch.cuda.get_device_name()}, python "
        f"{sys.version.split()[0]}"
    )
    print(
        f"{'workload':44s} {'eager ms':>9s} {'ours ms':>9s} {'inductor ms':>12s} "
        f"{'ours x':>7s} {'ind. x':>7s}"
    )
    ours_x, ind_x = [], []
    for name, (fn, inputs, training) in work.items():
        torch._dynamo.reset()
        variants = {
            "eager": fn,
            "ours": torch.compile(fn, backend=compile_fx, dynamic=False),
            "inductor": torch.compile(fn, backend="inductor", dynamic=False),
        }

        def step(f: Callable[..., Any]) -> Any:
            if training:
                out = f(*inputs)
                out.square().mean().backward()
                return out
            with torch.no_grad():
                return f(*inputs)

        ref = step(fn).detach().clone()
        for key, f in variants.items():
            for _ in range(3):
                out = step(f)
            torch.testing.assert_close(out, ref, atol=2e-3, rtol=2e-3, msg=f"{name}/{key}")
        times: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(args.reps):
            for key, f in variants.items():
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                step(f)
                torch.cuda.synchronize()
                times[key].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        ours_x.append(med["eager"] / med["ours"])
        ind_x.append(med["eager"] / med["inductor"])
        print(
            f"{name:44s} {med['eager']:9.3f} {med['ours']:9.3f} {med['inductor']:12.3f} "
            f"{ours_x[-1]:7.2f} {ind_x[-1]:7.2f}",
            flush=True,
        )
    print(
        f"{'geomean speedup over eager':44s} {'':31s} {statistics.geometric_mean(ours_x):7.2f} "
        f"{statistics.geometric_mean(ind_x):7.2f}"
    )


if __name__ == "__main__":
    main()
