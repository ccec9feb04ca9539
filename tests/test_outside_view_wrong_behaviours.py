"""Wrong behaviours found by running PyTorch's own Dynamo tests under Strata
(``benchmarks/dynamo_suite.py``, docs/dynamo-tests-2026-11-27b.md): compiled code that does
something eager does not. Each is a minimal program of our own, compared with eager, kept as a
strict xfail until the owner's fix flips it (then drop the mark).
Found with main at c4b6cfb; the tests without a mark were fixed since and stay as regressions.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import pytest
import torch

import compile_api


def _outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    """("value", result) or ("raises", exception type): what a call did."""
    try:
        return "value", fn(*args)
    except Exception as err:  # noqa: BLE001 - the exception is the outcome compared
        return "raises", type(err)


# ----------------------------------------------------------------------------- dynamic (dyna)


def _checked_length(x: torch.Tensor) -> torch.Tensor:
    y = x.nonzero()
    torch._check(y.shape[0] % 4 == 0)
    return torch.zeros(y.shape[0])


def _cond_of_checked_lengths(x: torch.Tensor) -> torch.Tensor:
    return torch.cond(x.shape[0] % 4 == 0, lambda: _checked_length(x), lambda: _checked_length(x))


# Found at c4b6cfb (test_misc::test_cond_runtime_assert_generation: the check was dropped inside
# the branches); fixed by 0d245ea. Kept as a regression test.
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_failed_check_inside_cond_branches_raises_as_in_eager(backend: str) -> None:
    compile_api.config.capture_dynamic_output_shape_ops = True
    compile_api.config.capture_scalar_outputs = True
    compiled = compile_api.compile(_cond_of_checked_lengths, backend=backend, dynamic=True)
    passing = torch.ones(4, 4)  # 16 nonzeros
    torch.testing.assert_close(compiled(passing), _cond_of_checked_lengths(passing))
    failing = torch.ones(5, 5)  # 25 nonzeros
    assert _outcome(_cond_of_checked_lengths, failing) == ("raises", RuntimeError)
    assert _outcome(compiled, failing)[0] == "raises"


# ----------------------------------------------------------------------------- object model (dynb)


class _OrderedSubclass(OrderedDict):  # type: ignore[type-arg]
    pass


def _reordered() -> _OrderedSubclass:
    d = _OrderedSubclass()
    d[2] = 4
    d[3] = 5
    d.move_to_end(2)  # order is now 3, 2 (the underlying dict still says 2, 3)
    return d


def _walks(x: torch.Tensor, d: _OrderedSubclass) -> tuple[list[Any], torch.Tensor]:
    first = next(iter(d.values()))
    return [list(d), list(d.keys()), list(d.values()), list(d.items())], x * first


# Found by test_dicts::test_ordered_dict_subclass_reordered_keys: walked in the underlying
# dict's insertion order. Since then guards.DictCopySource reads an OrderedDict's own order.
def test_an_ordered_dict_subclass_iterates_in_its_move_to_end_order() -> None:
    x = torch.ones(2)
    expected = _walks(x, _reordered())
    got = compile_api.compile(_walks, backend="eager")(x, _reordered())
    assert got[0] == expected[0]
    torch.testing.assert_close(got[1], expected[1])


def _update_with_two_dicts(x: torch.Tensor) -> torch.Tensor:
    try:
        {}.update({}, {})  # type: ignore[call-arg]
    except TypeError:
        return x + 1
    return x - 1


# Found by test_dicts::test_dict_update_rejects_too_many_args: the user's except branch was
# skipped. Since then list/dict/set methods check their arguments against the signature.
@pytest.mark.parametrize("fullgraph", [False, True])
def test_dict_update_with_two_positional_arguments_raises_type_error(fullgraph: bool) -> None:
    x = torch.zeros(1)
    got = compile_api.compile(_update_with_two_dicts, backend="eager", fullgraph=fullgraph)(x)
    torch.testing.assert_close(got, _update_with_two_dicts(x))


def _update_with_a_triple(x: torch.Tensor) -> torch.Tensor:
    try:
        {}.update([(1, 2, 3)])  # type: ignore[list-item]
    except ValueError:
        return x + 1
    return x - 1


# Found at c4b6cfb (test_dicts::test_dict_update_rejects_bad_sequence_element_length): eager's
# ValueError, caught by the user, was an InternalError under fullgraph; since session 11 the
# failing handler's call is asked of the real dict.update (symbolic_vm.eager_errors).
def test_dict_update_with_a_three_item_element_raises_value_error_under_fullgraph() -> None:
    x = torch.zeros(1)
    got = compile_api.compile(_update_with_a_triple, backend="eager", fullgraph=True)(x)
    torch.testing.assert_close(got, _update_with_a_triple(x))


def _list_holding_itself(x: torch.Tensor) -> tuple[list[Any], dict[str, Any], torch.Tensor]:
    items: list[Any] = [x]
    items.append(items)
    table: dict[str, Any] = {"x": x * 2}
    table["self"] = table
    return items, table, x + len(str([1, items[1][0].shape]))


# Found at c4b6cfb (test_lists/test_dicts: a container appended to itself): the VM's constant
# folding and the rebuild of the returned value recursed without end (an InternalError under
# fullgraph); since session 11 both follow the container's box once.
def test_containers_holding_themselves_come_back_as_eagers_under_fullgraph() -> None:
    x = torch.ones(2)
    expected = _list_holding_itself(x)
    got = compile_api.compile(_list_holding_itself, backend="eager", fullgraph=True)(x)
    assert got[0][1] is got[0] and got[1]["self"] is got[1]
    torch.testing.assert_close(got[0][0], expected[0][0])
    torch.testing.assert_close(got[1]["x"], expected[1]["x"])
    torch.testing.assert_close(got[2], expected[2])


def _module_with_a_parameter_built_inside(x: torch.Tensor) -> torch.Tensor:
    class WithParam(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.full((2,), 2.0))

    return WithParam().w * x


# Found at c4b6cfb (AttributeError 'cannot assign parameters before Module.__init__() call':
# the trace failed in STORE_ATTR and the resumed rest of __init__ ran on an object whose
# super().__init__() effects were dropped); passes since 52bc417. Kept as a regression test.
def test_a_module_built_inside_a_compiled_function_gets_its_parameter() -> None:
    x = torch.full((2,), 3.0)
    expected = _module_with_a_parameter_built_inside(x)
    got = compile_api.compile(_module_with_a_parameter_built_inside, backend="eager")(x)
    torch.testing.assert_close(got, expected)


# ----------------------------------------------------------------------------- guards (cpu)


def _branch_on_membership(x: torch.Tensor, s: set[Any]) -> torch.Tensor:
    return x + 1 if "a" in s else x - 1


# Found by test_sets::test_set_multiple_types / test_set_with_function: such a set was guarded
# by identity only and the stale branch ran after it changed. Since then its elements are guarded
# one by one (tests/test_set_arguments_guarded_by_contents.py).
@pytest.mark.parametrize(
    "other", [float("nan"), 1j, torch.sin], ids=["nan", "complex", "function"]
)
def test_membership_in_a_set_argument_follows_the_set(other: Any) -> None:
    compiled = compile_api.compile(_branch_on_membership, backend="eager")
    x = torch.zeros(1)
    s = {"a", "b", other}
    torch.testing.assert_close(compiled(x, s), _branch_on_membership(x, s))
    s.remove("a")
    torch.testing.assert_close(compiled(x, s), _branch_on_membership(x, s))


# ----------------------------------------------------------------------------- breaks (loop)


def _resets_then_adds(x: torch.Tensor) -> torch.Tensor:
    compile_api.reset()
    return x + 1


# Found at c4b6cfb: compile_api.reset() inside a compiled function dropped the resume function
# the rewritten frame calls after the break (NameError __resume_at_...); since session 11 it keeps
# the installed globals there, as torch.compiler.reset() does.
def test_compile_api_reset_inside_a_compiled_function_returns_eagers_result() -> None:
    x = torch.ones(3)
    compiled = compile_api.compile(_resets_then_adds, backend="eager")
    torch.testing.assert_close(compiled(x), _resets_then_adds(x))
    torch.testing.assert_close(compiled(x), _resets_then_adds(x))  # compiled afresh, still right
