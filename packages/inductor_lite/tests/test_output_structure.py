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
