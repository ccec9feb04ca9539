"""A dict from the frame keyed by Python functions (hashed and compared by identity), as
PyTorch's test_dicts2::test_dict_namedtuple and test_dicts::test_lazy_key_non_const_guarding
pass one (``{namedtuple: None, 3: t}``, a global ``{list: 2, namedtuple: 7}``): tracked item by
item, its keys guarded in order (DICT_KEYS: == on functions is identity), so a lookup, ``in``
and a key called after iteration give eager's answers and a dict with other keys recompiles.
Compared with eager and with torch.compile 2.13 (graphs)."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import torch
import torch._dynamo
from counting_backend import Counting
from object_model_harness import run_three_ways, same
from torch_reference import torch_reference

import compile_api


def _times_five(t: torch.Tensor) -> torch.Tensor:
    return t * 5


def branch_on_a_function_key(d: dict[Any, Any]) -> torch.Tensor:
    if namedtuple in d:
        return d[3] * 2
    return d[3] * 3


def keys_called_and_looked_up(d: dict[Any, Any], t: torch.Tensor) -> Any:
    out = [k(t) if callable(k) else k for k in d]
    return out, d.get(_times_five), next(iter(d.items()))[0] is _times_five


def test_a_function_key_branch_recompiles_when_the_keys_change() -> None:
    t = torch.ones(3)
    counter = Counting()
    compiled = compile_api.compile(branch_on_a_function_key, backend=counter, fullgraph=True)
    for d in ({namedtuple: None, 3: t}, {namedtuple: None, 3: t}, {2: None, 3: t}):
        torch.testing.assert_close(compiled(d), branch_on_a_function_key(d))
    assert counter.count == 2
    with torch_reference():
        torch._dynamo.reset()
        theirs = Counting()
        reference = torch.compile(branch_on_a_function_key, backend=theirs, fullgraph=True)
        for d in ({namedtuple: None, 3: t}, {namedtuple: None, 3: t}, {2: None, 3: t}):
            reference(d)
        assert counter.count <= theirs.count


def test_function_keys_read_back_from_the_dict_match_eager_in_one_graph() -> None:
    runs = run_three_ways(
        keys_called_and_looked_up, lambda: ({_times_five: 1, 3: 4}, torch.ones(2))
    )
    same(runs.ours, runs.eager)
    assert runs.our_graphs == 1
    with torch_reference():
        same(runs.theirs, runs.eager)
        assert runs.our_graphs <= runs.their_graphs
