"""Small models written from scratch: an MLP, a pre-LN transformer block, a GPT stack, a CNN."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .base import INFERENCE, Instance, Tolerance, Workload, randn, seeded_init


class MLP(nn.Module):
    """Three linear layers with GELU between them."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, width)
        self.fc2 = nn.Linear(width, width)
        self.fc3 = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.fc1(x))
        x = F.gelu(self.fc2(x))
        out: torch.Tensor = self.fc3(x)
        return out


class CausalSelfAttention(nn.Module):
    """Multi-head attention with the causal mask and softmax written out (no fused SDPA kernel)."""

    mask: torch.Tensor

    def __init__(self, d_model: int, n_heads: int, max_seq: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        mask = torch.tril(torch.ones(max_seq, max_seq, dtype=torch.bool))
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, d_model = x.shape
        head_dim = d_model // self.n_heads
        q, k, v = self.qkv(x).split(d_model, dim=2)
        q = q.view(batch, seq, self.n_heads, head_dim).transpose(1, 2)
        k = k.view(batch, seq, self.n_heads, head_dim).transpose(1, 2)
        v = v.view(batch, seq, self.n_heads, head_dim).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(head_dim))
        scores = scores.masked_fill(~self.mask[:seq, :seq], float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        merged = (weights @ v).transpose(1, 2).reshape(batch, seq, d_model)
        out: torch.Tensor = self.proj(merged)
        return out


class Block(nn.Module):
    """Pre-LN transformer block: x + attn(ln(x)), then x + mlp(ln(x)) with a 4x GELU MLP."""

    def __init__(self, d_model: int, n_heads: int, max_seq: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, max_seq)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        out: torch.Tensor = x + self.out(F.gelu(self.fc(self.ln2(x))))
        return out


class GPT(nn.Module):
    """Token and position embeddings, a stack of blocks, a final LayerNorm and an untied LM head."""

    def __init__(self, vocab: int, d_model: int, n_heads: int, n_layers: int, max_seq: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_seq, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, max_seq) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        logits: torch.Tensor = self.head(self.ln_f(x))
        return logits


class SmallCNN(nn.Module):
    """Three conv-BatchNorm-ReLU stages (the last two strided), global average pool, classifier."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(32)
        self.conv3 = nn.Conv2d(32, 64, 3, stride=2, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(64)
        self.fc = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.relu(self.bn3(self.conv3(x)))
        out: torch.Tensor = self.fc(x.mean(dim=(2, 3)))
        return out


# Sizes from the issue; the quick ones only exercise the harness.
D_MODEL, N_HEADS, SEQ, BATCH, VOCAB, N_LAYERS = 256, 4, 128, 8, 1024, 4
QUICK_D_MODEL, QUICK_SEQ, QUICK_BATCH, QUICK_VOCAB = 32, 8, 2, 64


def transformer_dims(quick: bool) -> tuple[int, int, int]:
    """(d_model, seq, batch) for the transformer workloads."""
    return (QUICK_D_MODEL, QUICK_SEQ, QUICK_BATCH) if quick else (D_MODEL, SEQ, BATCH)


def make_mlp(device: torch.device, quick: bool) -> tuple[MLP, torch.Tensor]:
    """The MLP (width 1024, batch 64) and its input."""
    width, batch = (32, 4) if quick else (1024, 64)
    with seeded_init(10):
        model = MLP(width)
    return model.to(device), randn((batch, width), device, 11)


def make_block(device: torch.device, quick: bool) -> tuple[Block, torch.Tensor]:
    """One transformer block (d=256, 4 heads) and an input of (batch 8, seq 128, d)."""
    d_model, seq, batch = transformer_dims(quick)
    with seeded_init(20):
        model = Block(d_model, N_HEADS, seq)
    return model.to(device), randn((batch, seq, d_model), device, 21)


def _forward_instance(model: nn.Module, *args: torch.Tensor) -> Instance:
    """An inference instance: the model in eval mode, called through a plain function."""
    model.eval()

    def forward(x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = model(x)
        return out

    return Instance(forward, args)


def _build_mlp(device: torch.device, quick: bool) -> Instance:
    return _forward_instance(*make_mlp(device, quick))


def _build_block(device: torch.device, quick: bool) -> Instance:
    return _forward_instance(*make_block(device, quick))


def _build_gpt(device: torch.device, quick: bool) -> Instance:
    d_model, seq, batch = transformer_dims(quick)
    vocab = QUICK_VOCAB if quick else VOCAB
    with seeded_init(30):
        model = GPT(vocab, d_model, N_HEADS, N_LAYERS, seq)
    idx = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(31))
    return _forward_instance(model.to(device), idx.to(device))


def _build_cnn(device: torch.device, quick: bool) -> Instance:
    with seeded_init(40):
        model = SmallCNN()
        # Non-trivial running statistics, so eval-mode BatchNorm is not the identity.
        for i, bn in enumerate((model.bn1, model.bn2, model.bn3)):
            channels = bn.num_features
            cpu = torch.device("cpu")
            bn.running_mean.copy_(  # type: ignore[union-attr]
                0.1 * randn((channels,), cpu, 41 + i))
            bn.running_var.copy_(  # type: ignore[union-attr]
                1.0 + 0.2 * randn((channels,), cpu, 44 + i).abs())
    shape = (2, 3, 16, 16) if quick else (8, 3, 64, 64)
    return _forward_instance(model.to(device), randn(shape, device, 47))


MLP_INFERENCE = Workload(
    name="mlp",
    kind=INFERENCE,
    description="3-layer GELU MLP, width 1024, batch 64, forward",
    build=_build_mlp,
    tolerance=Tolerance(rtol=1e-3, atol=1e-4),
)

TRANSFORMER_BLOCK = Workload(
    name="transformer_block",
    kind=INFERENCE,
    description=("pre-LN transformer block, d=256, 4 heads, seq 128, batch 8, "
                 "causal attention written out"),
    build=_build_block,
    tolerance=Tolerance(rtol=1e-3, atol=1e-4),
)

GPT4 = Workload(
    name="gpt4",
    kind=INFERENCE,
    description="GPT-style model, 4 blocks, d=256, vocab 1024, seq 128, batch 8, forward to logits",
    build=_build_gpt,
    tolerance=Tolerance(rtol=1e-3, atol=1e-3),
)

CNN = Workload(
    name="cnn_bn",
    kind=INFERENCE,
    description="3 conv+BatchNorm+ReLU stages, pool, linear; input 8x3x64x64; eval mode",
    build=_build_cnn,
    tolerance=Tolerance(rtol=1e-3, atol=1e-4),
)
