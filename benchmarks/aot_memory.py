"""aot: bytes saved for backward and training-step time, eager vs aot partitions.

For an MLP and a from-scratch transformer block this measures

* bytes saved for backward, counted the same way for every variant: a
  `torch.autograd.graph.saved_tensors_hooks` pack hook sees every tensor autograd saves during
  the forward (eager's per-op saves, or the compiled region's `save_for_backward`); reported as
  the sum over saves and over distinct storages (eager often saves the same tensor twice);
* the partitioner's own count (`CompiledArtifacts.stats.saved_bytes`) for aot variants;
* training-step time (forward, MSE loss, backward, SGD step), median over interleaved repeats,
  with aot's identity compiler (graphs run exactly as traced: every view a copy) and with
  `eager_compiler` (the same graphs, `*_copy` ops run as views where unobservable). Neither
  generates code, so this is aot's overhead or benefit, not a compiler's.

Usage:
    .venv/bin/python benchmarks/aot_memory.py [--repeats 20] [--quick] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import copy
import math
import statistics
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import aot


class MLP(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, 4 * dim)
        self.fc3 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(F.gelu(self.fc2(torch.tanh(self.fc1(x)))))


class TransformerBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q = q.view(b, t, h, d // h).transpose(1, 2)
        k = k.view(b, t, h, d // h).transpose(1, 2)
        v = v.view(b, t, h, d // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // h)
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=1)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def saved_bytes(run: Any, x: torch.Tensor) -> tuple[int, int]:
    """(sum over saves, sum over distinct storages) of what autograd saves in one forward."""
    total = 0
    storages: dict[tuple[int, int], int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        nbytes = t.numel() * t.element_size()
        total += nbytes
        key = (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        storages[key] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = run(x)
    del out
    return total, sum(storages.values())


def make_step(model: nn.Module, run: Any, x: torch.Tensor) -> Any:
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> None:
        opt.zero_grad()
        loss = (run(x) ** 2).mean()
        loss.backward()
        opt.step()

    return step


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def interleaved_times(steps: dict[str, Any], repeats: int, device: str) -> dict[str, float]:
    """Median step time per variant, variants interleaved round by round (fair under load)."""
    for step in steps.values():
        for _ in range(3):
            step()
    samples: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(repeats):
        for k, step in steps.items():
            _sync(device)
            start = time.perf_counter()
            step()
            _sync(device)
            samples[k].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in samples.items()}


def peak_step_memory(step: Any) -> int:
    """CUDA only: peak bytes allocated during one training step, above what was live before."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


VARIANTS: dict[str, dict[str, Any] | None] = {
    "eager": None,
    "aot default, identity": {"fw_compiler": aot.identity_compiler},
    "aot min-cut, identity": {
        "fw_compiler": aot.identity_compiler, "partition_fn": aot.min_cut_partition,
    },
    "aot default, eager_compiler": {"fw_compiler": aot.eager_compiler},
    "aot min-cut, eager_compiler": {
        "fw_compiler": aot.eager_compiler, "partition_fn": aot.min_cut_partition,
    },
    "aot decomp+min-cut, eager_compiler": {
        "fw_compiler": aot.eager_compiler,
        "partition_fn": aot.min_cut_partition,
        "decompositions": aot.core_decompositions(),
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (checks the script)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args()
    device = args.device
    torch.manual_seed(0)
    if args.quick:
        workloads = {
            "mlp": (MLP(16), torch.randn(8, 16)),
            "transformer_block": (TransformerBlock(32, 4), torch.randn(2, 8, 32)),
        }
    else:
        workloads = {
            "mlp (256x512, hidden 2048)": (MLP(512), torch.randn(256, 512)),
            "transformer_block (8x128x256, 4 heads)": (
                TransformerBlock(256, 4), torch.randn(8, 128, 256)
            ),
        }
    where = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {where}")
    print()
    peak_col = " peak step memory |" if device == "cuda" else ""
    print("| workload | variant | saved bytes (sum of saves) | saved bytes (distinct storages) "
          f"| partition's count | step time (ms, median) |{peak_col}")
    print("|---|---|---:|---:|---:|---:|" + ("---:|" if device == "cuda" else ""))
    for name, (base_model, x) in workloads.items():
        base_model = base_model.to(device)
        x = x.to(device)
        rows = {}
        steps = {}
        for variant, options in VARIANTS.items():
            model = copy.deepcopy(base_model)
            if options is None:
                run: Any = model
                stats = "-"
            else:
                compiled = aot.aot_module(model, **options)
                run = compiled
                run(x)
                art = compiled.artifacts
                assert art is not None and art.stats is not None
                stats = f"{art.stats.saved_bytes:,}"
            total, distinct = saved_bytes(run, x)
            rows[variant] = (total, distinct, stats)
            steps[variant] = make_step(model, run, x)
        times = interleaved_times(steps, args.repeats, device)
        for variant, (total, distinct, stats) in rows.items():
            ms = times[variant] * 1e3
            peak = f" {peak_step_memory(steps[variant]):,} |" if device == "cuda" else ""
            print(f"| {name} | {variant} | {total:,} | {distinct:,} | {stats} | {ms:.2f} |{peak}")


if __name__ == "__main__":
    main()
