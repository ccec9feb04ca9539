"""symbolic_vm: first-call capture time of a 12-layer from-scratch transformer, and ops/second.

Strata's path is `symbolic_vm.capture` on the model's forward frame plus running the transformed
code once with an identity backend (`gm.forward`); torch's is the first call of
`torch.compile(model, backend="eager", fullgraph=True)` (Dynamo's capture plus running the graph).
Each is measured in a fresh state (`torch._dynamo.reset()` for torch; a new capture for Strata,
which caches nothing), median over repeats, interleaved. "ops captured" counts call_function /
call_method nodes in the captured graph(s).

Usage:
    .venv/bin/python benchmarks/capture_speed.py [--layers 12] [--dim 256] [--repeats 5]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
import types

import torch
import torch.nn.functional as F
from torch import nn

import symbolic_vm


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.view(b, t, h, d // h).transpose(1, 2)
        k = k.view(b, t, h, d // h).transpose(1, 2)
        v = v.view(b, t, h, d // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // h)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        att = F.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Transformer(nn.Module):
    def __init__(self, layers: int, dim: int, heads: int, vocab: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(1, 64, dim))
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.tok(idx) + self.pos[:, :t]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def strata_first_call(model: nn.Module, idx: torch.Tensor) -> tuple[float, int, torch.Tensor]:
    start = time.perf_counter()
    frame = symbolic_vm.frame_from_call(model.forward, (idx,))
    result = symbolic_vm.capture(frame, symbolic_vm.CaptureConfig(fullgraph=True))
    g = dict(type(model).forward.__globals__)
    for graph in result.graphs:
        g[graph.name] = graph.gm.forward
    g.update(result.globals_to_install)
    fn = types.FunctionType(result.code, g, "forward")
    out = fn(model, idx)
    elapsed = time.perf_counter() - start
    ops = sum(
        1 for graph in result.graphs for n in graph.gm.graph.nodes
        if n.op in ("call_function", "call_method")
    )
    return elapsed, ops, out


def torch_first_call(model: nn.Module, idx: torch.Tensor) -> tuple[float, int, torch.Tensor]:
    import torch._dynamo

    torch._dynamo.reset()
    counted: list[int] = []

    def eager_counting(gm: torch.fx.GraphModule, example_inputs: object) -> object:
        counted.append(sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method")))
        return gm.forward

    compiled = torch.compile(model, backend=eager_counting, fullgraph=True)
    start = time.perf_counter()
    out = compiled(idx)
    elapsed = time.perf_counter() - start
    return elapsed, sum(counted), out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = Transformer(args.layers, args.dim, args.heads, vocab=1000).eval()
    idx = torch.randint(0, 1000, (2, 32))
    expected = model(idx)
    strata_times, torch_times = [], []
    strata_ops = torch_ops = 0
    for _ in range(args.repeats):
        t, strata_ops, out = strata_first_call(model, idx)
        torch.testing.assert_close(out, expected)
        strata_times.append(t)
        t, torch_ops, out = torch_first_call(model, idx)
        torch.testing.assert_close(out, expected)
        torch_times.append(t)
    s, d = statistics.median(strata_times), statistics.median(torch_times)
    print(f"model: {args.layers}-layer transformer, dim {args.dim}, heads {args.heads}, "
          f"input {tuple(idx.shape)}; {args.repeats} repeats, median first-call wall time")
    print(f"{'':28}{'first call (s)':>16}{'ops captured':>14}{'ops/s':>12}")
    print(f"{'strata symbolic_vm':28}{s:>16.3f}{strata_ops:>14}{strata_ops / s:>12.0f}")
    print(f"{'torch.compile(eager)':28}{d:>16.3f}{torch_ops:>14}{torch_ops / d:>12.0f}")
    print(f"strata / torch time ratio: {s / d:.2f}")


if __name__ == "__main__":
    main()
