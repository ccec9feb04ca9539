"""``types.MappingProxyType(d)`` of a dict made in the compiled function, and
``weakref.ref(obj)`` of a frame object, as PyTorch's test_dicts2::
test_dict_update_from_mapping_proxy and test_weakref_dict use them: the proxy is a read-only
live view of the dict (``d.update(proxy)``, ``in``, ``len``, iteration, its methods), and
``mod in weak_key_dict`` runs ``WeakKeyDictionary.__contains__``'s ``ref(key)`` with the dict's
weakref keys guarded as their referents. Compared with eager and with torch.compile 2.13
(graphs); a changed WeakKeyDictionary or another module recompiles (where torch 2.13 gives
a stale result for another module)."""

from __future__ import annotations

import types
import weakref
from typing import Any

import pytest
import torch
import torch._dynamo
from counting_backend import Counting
from object_model_harness import run_three_ways, same
from torch_reference import torch_reference

import compile_api
from symbolic_vm import Unsupported


def update_from_a_proxy(x: torch.Tensor) -> Any:
    source = {"a": x, "b": x + 1}
    d = {"a": x - 1}
    d.update(types.MappingProxyType(source))
    proxy = types.MappingProxyType(d)
    d["c"] = 5  # shows through the proxy
    return d["a"], d["b"], len(proxy), "c" in proxy, list(proxy), proxy["c"], proxy.get("z", 3)


def test_a_mapping_proxy_of_a_dict_made_here_reads_as_eager_in_one_graph() -> None:
    runs = run_three_ways(update_from_a_proxy, lambda: (torch.ones(2),))
    same(runs.ours, runs.eager)
    assert runs.our_graphs == 1
    with torch_reference():
        same(runs.theirs, runs.eager)
        assert runs.our_graphs <= runs.their_graphs


def _writes_through_a_proxy(x: torch.Tensor) -> Any:
    proxy = types.MappingProxyType({"a": 1})
    try:
        proxy["b"] = 2  # type: ignore[index]
    except TypeError as exc:
        return x + 1, str(exc)
    return x, ""


def test_writing_through_a_proxy_raises_eagers_type_error() -> None:
    compiled = compile_api.compile(_writes_through_a_proxy, backend="eager", fullgraph=True)
    got, expected = compiled(torch.ones(1)), _writes_through_a_proxy(torch.ones(1))
    torch.testing.assert_close(got[0], expected[0])
    assert got[1] == expected[1]


_MOD1, _MOD2, _MOD3 = torch.nn.Module(), torch.nn.Module(), torch.nn.Module()
_STATES: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def branch_on_weak_keys(x: torch.Tensor, mod: torch.nn.Module) -> Any:
    if mod in _STATES:
        x = torch.sin(x) * _STATES[mod]
    if _MOD2 in _STATES:
        x = torch.cos(x)
    return x


@pytest.fixture
def states() -> Any:
    _STATES.clear()
    _STATES[_MOD1], _STATES[_MOD2] = 2, 3
    yield _STATES
    _STATES.clear()


def test_membership_in_a_weak_key_dictionary_follows_it_like_torch(states: Any) -> None:
    x = torch.ones(2)
    counter = Counting()
    compiled = compile_api.compile(branch_on_weak_keys, backend=counter, fullgraph=True)

    def calls(fn: Any) -> list[Any]:
        out = [fn(x, _MOD1), fn(x, _MOD1), fn(x, _MOD3)]  # another module: recompiles
        del states[_MOD2]  # the dict changed: recompiles
        out.append(fn(x, _MOD1))
        states[_MOD2] = 3
        return out

    expected = calls(branch_on_weak_keys)
    for got, want in zip(calls(compiled), expected, strict=True):
        torch.testing.assert_close(got, want)
    assert counter.count == 3
    with torch_reference():
        # Only the first call: for _MOD3 (not in the dict) torch 2.13 reuses the graph made
        # for _MOD1 and returns its stale branch (found writing this test).
        torch._dynamo.reset()
        theirs = Counting()
        reference = torch.compile(branch_on_weak_keys, backend=theirs, fullgraph=True)
        torch.testing.assert_close(reference(x, _MOD1), expected[0])
        assert theirs.count == 1


def _ref_of(x: torch.Tensor, s: set[int]) -> Any:
    return x + 1, weakref.ref(s)() is s


def test_a_weak_reference_to_a_value_the_vm_copies_runs_eagerly() -> None:
    # The VM tracks a set argument as a private copy: a reference to that copy would be dead.
    # Without fullgraph the call runs at a break; the resumed frame called the reference and
    # tracked its set as a second copy, so ``is s`` was False (eager: True).
    s = {1}
    compile_api.reset()
    got = compile_api.compile(_ref_of, backend="eager")(torch.ones(1), s)
    assert got[1] is True
    compile_api.reset()
    with pytest.raises(Unsupported, match="weakref.ref"):
        compile_api.compile(_ref_of, backend="eager", fullgraph=True)(torch.ones(1), s)
