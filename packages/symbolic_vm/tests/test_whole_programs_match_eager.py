"""Whole programs mixing the features, each compiled and compared with eager."""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import operator

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from vm_harness import check

X = torch.randn(4, 5)


class Scaler:
    def __init__(self, k):
        self.k = k

    def __call__(self, x):
        return x * self.k


SCALER = Scaler(3.0)


class Mode(enum.Enum):
    FAST = 1
    SLOW = 2


@dataclasses.dataclass(frozen=True)
class Frozen:
    a: int = 2
    b: float = 0.5


def callable_object_global(x):
    return SCALER(x) + Scaler(2.0)(x)


def enum_branch(x, mode=Mode.FAST):
    if mode is Mode.FAST:
        return x * 2
    return x


def frozen_dataclass_inside(x):
    f = Frozen(a=3)
    return x * f.a + f.b


def dict_of_lists(x):
    groups = {"a": [], "b": []}
    for i in range(4):
        groups["a" if i % 2 else "b"].append(x[i])
    return {k: torch.stack(v) for k, v in groups.items()}


def reduce_with_functools(x):
    return functools.reduce(operator.add, [x, x * 2, x * 3])


def running_stats(x):
    mean = x.mean(0)
    var = ((x - mean) ** 2).mean(0)
    return (x - mean) / torch.sqrt(var + 1e-5)


def layer_stack(x, widths=(5, 3, 2)):
    h = x
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        w = torch.ones(a, b) / (i + 1)
        h = torch.tanh(h @ w)
    return h


def string_keys_and_format(x, prefix="layer"):
    out = {}
    for i in range(3):
        out[f"{prefix}.{i}"] = x[:, i].sum()
    return out


def early_return_in_loop(x):
    for i in range(10):
        if i == 3:
            return x * i
    return x


def nested_function_closure_chain(x):
    def outer(a):
        def inner(b):
            return a + b
        return inner

    return outer(x)(1) + outer(2)(x)


def kwargs_forwarding(x):
    def inner(t, *, scale=1.0, shift=0.0):
        return t * scale + shift

    def outer(t, **kw):
        return inner(t, **kw)

    return outer(x, scale=2.0, shift=1.0) + outer(x)


def args_forwarding(x):
    def inner(*ts):
        return torch.cat(ts, dim=0)

    def outer(*args):
        return inner(*args, x)

    return outer(x, x * 2)


def tuple_compare_and_sort(x):
    shapes = sorted([(3, 1), (1, 2), (2, 0)])
    return x * shapes[0][0] + (shapes[-1] > (2, 5))


def walrus_and_conditional_expr(x):
    if (n := x.shape[0]) > 2:
        return x[: n - 1]
    return x


def global_constant_table(x):
    table = {"relu": F.relu, "tanh": torch.tanh, "gelu": F.gelu}
    return [table[name](x) for name in ("relu", "tanh", "gelu")]


def math_and_builtins(x):
    return x * math.ceil(2.1) + round(math.log2(8)) + pow(2, 3) + divmod(9, 4)[1]


def list_index_count_remove(x):
    names = ["a", "b", "c", "b"]
    names.remove("c")
    return x * names.index("b") + names.count("b")


def chunk_and_zip(x):
    parts = x.chunk(2, dim=1)
    return [p.sum() * i for i, p in enumerate(parts)]


def masked_softmax(x):
    mask = torch.arange(5) < 3
    return torch.softmax(x.masked_fill(~mask, float("-inf")), dim=-1)


def clamp_and_where(x):
    y = torch.where(x > 0, x, torch.zeros_like(x))
    return y.clamp_(max=0.5)


def view_chain(x):
    return x.view(2, 2, 5).permute(2, 0, 1).reshape(5, -1).t().contiguous().view(-1)[:7]


def type_conversions(x):
    i = x.long()
    return i.float() + x.to(dtype=torch.float64).float(), x.to(torch.int32).dtype


def inplace_on_view(x):
    y = x.clone()
    y[:, 0].mul_(0)
    y.narrow(1, 1, 2).add_(1)
    return y


def returns_tensor_and_list_alias(x):
    y = x + 1
    out = [y, y]
    return out, out[0] is out[1]


PROGRAMS = [
    callable_object_global, enum_branch, frozen_dataclass_inside, dict_of_lists,
    reduce_with_functools, running_stats, layer_stack, string_keys_and_format,
    early_return_in_loop, nested_function_closure_chain, kwargs_forwarding, args_forwarding,
    tuple_compare_and_sort, walrus_and_conditional_expr, global_constant_table, math_and_builtins,
    list_index_count_remove, chunk_and_zip, masked_softmax, clamp_and_where, view_chain,
    type_conversions, inplace_on_view, returns_tensor_and_list_alias,
]


@pytest.mark.parametrize("fn", PROGRAMS, ids=[p.__name__ for p in PROGRAMS])
def test_program_matches_eager(fn):
    compiled = check(fn, X)
    assert compiled.graph_count <= 1


class TinyLM(nn.Module):
    def __init__(self, vocab=11, dim=8, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList([nn.Linear(dim, dim) for _ in range(layers)])
        self.out = nn.Linear(dim, vocab)

    def forward(self, idx, targets=None):
        h = self.emb(idx)
        for layer in self.layers:
            h = h + F.gelu(layer(h))
        logits = self.out(h)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


@pytest.mark.parametrize("with_targets", [False, True])
def test_tiny_language_model_with_optional_loss(with_targets):
    model = TinyLM()
    idx = torch.randint(0, 11, (2, 6))
    targets = torch.randint(0, 11, (2, 6)) if with_targets else None
    check(model.forward, idx, targets)
