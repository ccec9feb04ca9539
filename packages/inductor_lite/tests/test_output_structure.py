"""A compiled graph hands back its output in the structure eager returns (``unflattener``'s
direct paths for one tensor and plain tuples/lists, pytree for everything else)."""

from __future__ import annotations

import collections
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree

from inductor_lite.compile import unflattener

Pair = collections.namedtuple("Pair", "a b")


@pytest.mark.parametrize(
    "make",
    [
        lambda x: x,
        lambda x: (x,),
        lambda x: (x, x + 1),
        lambda x: [x, x + 1],
        lambda x: (),
        lambda x: Pair(x, x + 1),
        lambda x: {"a": x, "b": (x + 1,)},
        lambda x: (x, [x + 1, (x + 2,)]),
    ],
    ids=["leaf", "tuple1", "tuple2", "list", "empty", "namedtuple", "dict", "nested"],
)
def test_unflattener_builds_what_pytree_builds(make: Any) -> None:
    out = make(torch.ones(2))
    flat, spec = pytree.tree_flatten(out)
    got = unflattener(spec)(tuple(flat))
    want = pytree.tree_unflatten(list(flat), spec)
    assert type(got) is type(want)
    assert pytree.tree_flatten(got)[1] == spec
    assert all(a is b for a, b in zip(pytree.tree_leaves(got), flat, strict=True))


def test_compiled_outputs_keep_eager_structure(check: Any) -> None:
    def fn(x: torch.Tensor) -> Any:
        return torch.sin(x), (torch.cos(x), x * 2)

    x = torch.randn(8)
    with torch.no_grad():
        out = check(fn, [x])(x)
    assert type(out) is tuple and type(out[1]) is tuple


def test_an_aten_result_differing_only_in_size_one_strides_is_not_copied() -> None:
    from inductor_lite.wrapper import _restride

    t = torch.randn(1, 8, 1, 1)  # strides (8, 1, 1, 1); its meta said channels-last
    assert _restride(t, (1, 8, 1, 1), (8, 1, 8, 8)) is t
    u = torch.randn(2, 8, 3, 1)  # a dim of 3 elements with another stride: copied
    v = _restride(u, (2, 8, 3, 1), (24, 1, 8, 8))
    assert v is not u and v.stride() == (24, 1, 8, 8) and torch.equal(v, u)


class _SqueezeExcite(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Conv2d(16, 8, 1), torch.nn.Conv2d(8, 16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.mean((2, 3), keepdim=True)
        return x * torch.sigmoid(self.fc2(torch.relu(self.fc1(s))))


def test_squeeze_excite_block_matches_eager(check: Any) -> None:
    # 1x1 convolutions on a 1x1 map: aten's results carry other strides on the size-1 dims
    m = _SqueezeExcite().eval()
    x = torch.randn(1, 16, 12, 12).to(memory_format=torch.channels_last)
    c = check(m, [x], atol=1e-5, rtol=1e-5)
    y = torch.randn(1, 16, 12, 12).to(memory_format=torch.channels_last)
    with torch.no_grad():
        torch.testing.assert_close(c(y), m(y), atol=1e-5, rtol=1e-5)
