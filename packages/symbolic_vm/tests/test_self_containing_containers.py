"""A list or dict argument that holds itself (``l.append(l)``), as PyTorch's
test_skip_non_tensor::test_recursive_list passes one: wrapped without recursing (was an
InternalError under fullgraph: RecursionError), its inner self the same tracked value (guarded
to stay itself), and ``l in [l]``, ``l == l``, ``len(l)``, appends as eager. Each program runs
eagerly and through the VM (fullgraph) on equal inputs."""

from __future__ import annotations

from typing import Any

import torch
from vm_harness import run_vm


def _holding_itself(*items: Any) -> list[Any]:
    made = list(items)
    made.append(made)
    return made


def test_a_list_holding_itself_is_returned_as_it_is() -> None:
    def fn(x: Any) -> Any:
        return x

    lst = _holding_itself()
    compiled = run_vm(fn, lst)
    assert compiled.output is lst and compiled.graph_count == 0


def test_membership_equality_and_appends_on_a_list_holding_itself_match_eager() -> None:
    def fn(t: torch.Tensor, lst: list[Any]) -> Any:
        found = lst in [lst], lst[1] is lst, lst == lst, len(lst), 2 in lst
        lst.append(3)
        return t + len(lst), found, lst[1] is lst, lst[-1]

    eager_list, vm_list = _holding_itself(1), _holding_itself(1)
    expected = fn(torch.ones(2), eager_list)
    compiled = run_vm(fn, torch.ones(2), vm_list)
    torch.testing.assert_close(compiled.output[0], expected[0])
    assert compiled.output[1:] == expected[1:] and compiled.graph_count == 1
    # the caller's list as eager left it (== would recurse: compared item by item)
    assert len(vm_list) == len(eager_list) == 3 and vm_list[1] is vm_list and vm_list[2] == 3


def test_a_dict_holding_itself_is_read_as_eager() -> None:
    def fn(t: torch.Tensor, d: dict[str, Any]) -> Any:
        return t * d["k"], d["me"] is d, "me" in d["me"], len(d["me"]["me"])

    d: dict[str, Any] = {"k": 2.0}
    d["me"] = d
    expected = fn(torch.ones(2), d)
    compiled = run_vm(fn, torch.ones(2), d)
    torch.testing.assert_close(compiled.output[0], expected[0])
    assert compiled.output[1:] == expected[1:]


def test_a_list_that_no_longer_holds_itself_recompiles() -> None:
    def fn(t: torch.Tensor, lst: list[Any]) -> Any:
        return t + 1, lst[1] is lst

    lst = _holding_itself(1)
    compiled = run_vm(fn, torch.ones(1), lst)
    assert compiled.output[1] is True
    assert compiled.guard({"t": torch.ones(1), "lst": lst})
    assert not compiled.guard({"t": torch.ones(1), "lst": [1, [1, 2]]})
