"""The headline cases: the TorchDynamo README toy, an MLP and a transformer block."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from vm_harness import check, run_vm

from symbolic_vm import Unsupported


def readme_toy(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


def readme_toy_no_branch(a, b):
    x = a / (torch.abs(a) + 1)
    return x, b.sum() < 0


def test_readme_toy_prefix_graph_has_the_readme_node_names():
    compiled = check(readme_toy_no_branch, torch.randn(10), torch.randn(10))
    assert compiled.graph_count == 1
    names = [n.name for n in compiled.result.graphs[0].gm.graph.nodes]
    assert names == ["a", "b", "abs_1", "add", "truediv", "sum_1", "lt", "output"]


def test_readme_toy_data_dependent_branch_is_unsupported_with_fullgraph():
    with pytest.raises(Unsupported) as info:
        run_vm(readme_toy, torch.randn(10), torch.randn(10))
    err = info.value
    assert err.filename == __file__
    assert "if b.sum() < 0" in err.source_line
    assert "data-dependent" in err.reason
    assert err.hint


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def test_mlp_captures_one_graph_with_parameters_as_inputs():
    model = MLP()
    compiled = check(model.forward, torch.randn(3, 8))
    assert compiled.graph_count == 1
    placeholders = compiled.placeholders()
    assert placeholders[0] == "x"
    assert set(placeholders[1:]) == {"l_self_fc1_weight", "l_self_fc1_bias",
                                     "l_self_fc2_weight", "l_self_fc2_bias"}
    assert compiled.targets() == [F.linear, F.relu, F.linear]


class Block(nn.Module):
    def __init__(self, dim=16, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.ln2 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.drop = nn.Dropout(0.0)

    def attention(self, x):
        batch, seq, dim = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.view(batch, seq, self.heads, dim // self.heads).transpose(1, 2)
        k = k.view(batch, seq, self.heads, dim // self.heads).transpose(1, 2)
        v = v.view(batch, seq, self.heads, dim // self.heads).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / (dim // self.heads) ** 0.5
        mask = torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(mask, float("-inf"))
        out = F.softmax(scores, dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(batch, seq, dim))

    def forward(self, x):
        x = x + self.drop(self.attention(self.ln1(x)))
        return x + self.mlp(self.ln2(x))


def test_transformer_block_matches_eager_in_one_graph():
    block = Block()
    compiled = check(block.forward, torch.randn(2, 5, 16))
    assert compiled.graph_count == 1
    assert operator.matmul in compiled.targets()


def test_transformer_block_gradients_flow_through_the_captured_graph():
    block = Block()
    x = torch.randn(2, 5, 16, requires_grad=True)
    compiled = run_vm(block.forward, x)
    compiled.output.sum().backward()
    grad_vm = x.grad.clone()
    x.grad = None
    block(x).sum().backward()
    torch.testing.assert_close(grad_vm, x.grad)
