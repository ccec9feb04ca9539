"""inductor_lite on CPU: eager vs compile_fx vs torch.compile's inductor, side by side.

Every workload is compiled by both backends through ``torch.compile`` (ours as
``backend=compile_fx``), checked against eager, then timed interleaved (eager, ours,
inductor, eager, ...) so that machine noise hits all three alike. Reports medians.

    .venv/bin/python benchmarks/inductor_cpu.py [--reps 30] [--only NAME]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from inductor_lite import compile_fx


def pointwise_chain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(torch.relu(x * 2.0 + y) - 0.5) * x + 1.0


def ln_softmax(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.softmax(F.layer_norm(x, (x.shape[-1],), w, b), dim=-1)


class Block(nn.Module):
    def __init__(self, d: int = 256, heads: int = 4) -> None:
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


def mlp() -> nn.Module:
    return nn.Sequential(
        nn.Linear(512, 1024),
        nn.GELU(),
        nn.LayerNorm(1024),
        nn.Linear(1024, 1024),
        nn.SiLU(),
        nn.Linear(1024, 10),
    )


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )


def workloads() -> dict[str, tuple[Callable[..., Any], Callable[[], list[torch.Tensor]], bool]]:
    """name -> (callable, inputs factory, training?)."""
    torch.manual_seed(0)
    block = Block().eval()
    m = mlp().eval()
    c = cnn().eval()
    train_mlp = mlp().train()
    return {
        "pointwise_chain_4096x1024": (
            pointwise_chain,
            lambda: [torch.randn(4096, 1024), torch.randn(1024)],
            False,
        ),
        "layer_norm_softmax_4096x1024": (
            ln_softmax,
            lambda: [torch.randn(4096, 1024), torch.randn(1024), torch.randn(1024)],
            False,
        ),
        "mlp_b256": (m, lambda: [torch.randn(256, 512)], False),
        "transformer_block_b8_t128_d256": (block, lambda: [torch.randn(8, 128, 256)], False),
        "cnn_b16_32x32": (c, lambda: [torch.randn(16, 3, 32, 32)], False),
        "mlp_training_step_b256": (train_mlp, lambda: [torch.randn(256, 512)], True),
    }


def _step(fn: Callable[..., Any], training: bool) -> Callable[[list[torch.Tensor]], Any]:
    if training:

        def run(args: list[torch.Tensor]) -> Any:
            out = fn(*args)
            out.square().mean().backward()
            return out

        return run

    def infer(args: list[torch.Tensor]) -> Any:
        with torch.no_grad():
            return fn(*args)

    return infer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--only", default=None)
    args = parser.parse_args()
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"python {sys.version.split()[0]}"
    )
    print(
        f"{'workload':34s} {'eager ms':>9s} {'ours ms':>9s} {'inductor ms':>12s} "
        f"{'ours x':>7s} {'ind. x':>7s} {'ours/ind':>8s}"
    )
    ratios_ours, ratios_ind = [], []
    for name, (fn, make_inputs, training) in workloads().items():
        if args.only and args.only not in name:
            continue
        torch._dynamo.reset()
        inputs = make_inputs()
        # separate copies: the two compiled wrappers must not share one module's frame cache
        ours = torch.compile(copy.deepcopy(fn), backend=compile_fx, dynamic=False)
        ind = torch.compile(copy.deepcopy(fn), backend="inductor", dynamic=False)
        runners = {
            "eager": _step(fn, training),
            "ours": _step(ours, training),
            "inductor": _step(ind, training),
        }
        with torch.no_grad():
            ref = fn(*inputs) if not training else None
        for key, run in runners.items():  # compile + warm up + check
            for _ in range(3):
                out = run(inputs)
            if ref is not None:
                torch.testing.assert_close(out, ref, atol=1e-3, rtol=1e-3, msg=f"{name}/{key}")
        times: dict[str, list[float]] = {k: [] for k in runners}
        for _ in range(args.reps):
            for key, run in runners.items():
                t0 = time.perf_counter()
                run(inputs)
                times[key].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        so, si = med["eager"] / med["ours"], med["eager"] / med["inductor"]
        ratios_ours.append(so)
        ratios_ind.append(si)
        print(
            f"{name:34s} {med['eager']:9.3f} {med['ours']:9.3f} {med['inductor']:12.3f} "
            f"{so:7.2f} {si:7.2f} {med['ours'] / med['inductor']:8.2f}",
            flush=True,
        )
    if ratios_ours:
        print(
            f"{'geomean speedup over eager':34s} {'':9s} {'':9s} {'':12s} "
            f"{statistics.geometric_mean(ratios_ours):7.2f} "
            f"{statistics.geometric_mean(ratios_ind):7.2f}"
        )


if __name__ == "__main__":
    main()
