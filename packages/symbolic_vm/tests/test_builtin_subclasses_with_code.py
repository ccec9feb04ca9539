"""Instances of user subclasses of tuple, set, frozenset and dict that have code of their own,
made in the compiled function, as PyTorch's test_sets::CustomSetTests, test_list::
CustomNewTupleTests and test_dicts2's dict.__new__ tests make them: a set subclass overriding
``add`` (calling ``super().add``), a tuple subclass whose ``__new__`` calls
``super().__new__(cls, arg)`` and sets an attribute, ``dict.__new__(klass)``.

Each is a user object that *is* the set/tuple: the class's Python methods run as written, set's
and tuple's own C methods and operators act on the value (their results plain sets/tuples, as in
CPython). Compared with eager (results, types, attributes) and with torch.compile 2.13 (graphs).
"""

from __future__ import annotations

import collections
from typing import Any

import pytest
import torch
from object_model_harness import run_three_ways, same
from torch_reference import torch_reference
from vm_harness import check

import compile_api


class AddsOne(set):  # type: ignore[type-arg]
    def add(self, item: int) -> None:
        return super().add(item + 1)

    def contains(self, item: object) -> bool:
        return True


class IteratesOtherwise(set):  # type: ignore[type-arg]
    def __iter__(self) -> Any:  # ``in`` and len() stay set's own
        return iter([100])


class WithNew(tuple):  # type: ignore[type-arg]
    def __new__(cls, arg: Any, newarg: Any = None) -> WithNew:
        self = super().__new__(cls, arg)
        self.newarg = newarg
        return self


class Grandchild(WithNew):
    pass


class EqualToAll(tuple):  # type: ignore[type-arg]
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = tuple.__hash__


class Smallest(frozenset):  # type: ignore[type-arg]
    def first(self) -> Any:
        return min(self)


def set_subclass_overriding_add(x: torch.Tensor) -> Any:  # as test_sets::CustomSetTests
    s = AddsOne([1, 2])
    s.add(3)
    return x + len(s), s == {1, 2, 4}, s.contains(0), type(s) is AddsOne


def set_subclass_in_place_and_set_methods(x: torch.Tensor) -> Any:
    s = AddsOne([1, 2])
    s.add(3)
    s |= {5}  # the instance itself, changed (torch 2.13 turns it into a plain set)
    s.update([7])
    s.discard(1)
    return (
        x + len(s), s == {2, 4, 5, 7}, s.contains(0), 4 in s, sorted(s), type(s) is AddsOne,
        isinstance(s, set), s | {9}, type(s.copy()).__name__, s.issubset(range(10)), bool(s),
    )


def set_subclass_with_its_own_iter(x: torch.Tensor) -> Any:
    s = IteratesOtherwise([1, 2])
    return x + 1, 1 in s, 100 in s, list(s), len(s)


def tuple_subclass_new_through_super(x: torch.Tensor) -> Any:
    t = WithNew([1, 2], newarg=5)
    g = Grandchild(iter([3]), newarg=x)
    return (
        g.newarg * t.newarg, type(t) is WithNew, tuple(t) == (1, 2), t[0], t[-1:], len(t),
        t + (3,), list(g), type(g).__name__, t == (1, 2), 2 in t, EqualToAll((1,)) == (9,),
    )


def frozenset_subclass(x: torch.Tensor) -> Any:
    f = Smallest([3, 1])
    return x + f.first(), type(f).__name__, 3 in f, len(f), f | {4}


def _custom_dict(base: type) -> type:
    class CustomDict(base):  # type: ignore[valid-type,misc]
        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            return super().__new__(cls, *args, **kwargs)

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)

    return CustomDict


CUSTOM_DICTS = (_custom_dict(collections.OrderedDict), _custom_dict(dict))


def dict_subclass_new_through_super(x: torch.Tensor) -> Any:  # as test_dicts2's
    out = []
    for cls in CUSTOM_DICTS:
        c = cls()
        c["key"] = x
        out.append(c["key"] + 1 if "key" in c else x)
    return out


class MyDict(dict):  # type: ignore[type-arg]
    pass


def dict_new_of_a_class_argument(x: torch.Tensor, klass: type) -> Any:
    made = dict.__new__(klass)
    made["x"] = x * 2
    if isinstance(made, MyDict):
        made.attr = 3
    return made


@pytest.mark.parametrize("fn", [
    set_subclass_overriding_add, set_subclass_with_its_own_iter,
    tuple_subclass_new_through_super, frozenset_subclass, dict_subclass_new_through_super,
])
def test_subclass_instances_made_in_the_frame_behave_as_eager_in_one_graph(fn: Any) -> None:
    runs = run_three_ways(fn, lambda: (torch.ones(2),))
    same(runs.ours, runs.eager)
    assert runs.our_graphs == 1
    with torch_reference():
        same(runs.theirs, runs.eager)
        assert runs.our_graphs <= runs.their_graphs


@pytest.mark.parametrize("fn", [set_subclass_in_place_and_set_methods])
def test_subclass_instances_beyond_what_torch_compile_keeps_behave_as_eager(fn: Any) -> None:
    assert check(fn, torch.ones(2)).graph_count == 1


@pytest.mark.parametrize("klass", [MyDict, dict])
def test_dict_new_of_a_class_argument_returns_eagers_object(klass: type) -> None:
    runs = run_three_ways(dict_new_of_a_class_argument, lambda: (torch.ones(2), klass))
    assert type(runs.ours) is klass and getattr(runs.ours, "attr", None) == getattr(
        runs.eager, "attr", None
    )
    same(dict(runs.ours), dict(runs.eager))
    assert runs.our_graphs == 1
    with torch_reference():
        assert runs.our_graphs <= runs.their_graphs


def _returns_one(x: torch.Tensor) -> Any:
    return x + 1, AddsOne([1]), WithNew((2,), newarg=3)


def test_such_an_instance_leaving_the_frame_is_rebuilt_as_eager_made_it() -> None:
    """Rebuilt from the tuple/set it is through its C base, then its attributes (before: the
    frame ran eagerly, and fullgraph=True raised; torch.compile 2.13 compiles it)."""
    expected = _returns_one(torch.ones(1))
    for fullgraph in (False, True):
        compile_api.reset()
        graphs: list[Any] = []

        def counter(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
            graphs.append(gm)
            return gm.forward

        compiled = compile_api.compile(_returns_one, backend=counter, fullgraph=fullgraph)
        for _ in range(2):  # a fresh instance per call, as eager makes one
            got = compiled(torch.ones(1))
            assert type(got[1]) is AddsOne and got[1] == expected[1]
            assert type(got[2]) is WithNew and got[2] == expected[2] and got[2].newarg == 3
            assert compiled(torch.ones(1))[1] is not got[1]
        assert len(graphs) == 1


def set_copies_of_a_set_subclass_with_its_own_iter(x: torch.Tensor) -> Any:
    s = IteratesOtherwise([1, 2])
    t = {5}
    t.update(s)
    return x + 1, set(s), frozenset(s), t, {*s}, {3} | s, s.issubset({1, 2, 3}), sorted(s)


def test_set_copies_read_the_table_not_the_classs_iter() -> None:
    # set(s), frozenset(s), {*s}, t.update(s) copy a set's table (CPython never calls the
    # class's __iter__ there; sorted() does): set(s) gave {100}
    assert check(set_copies_of_a_set_subclass_with_its_own_iter, torch.ones(1)).graph_count == 1


class FrameSet(set):  # type: ignore[type-arg]
    def first(self) -> Any:
        return min(self)


class FrameList(list):  # type: ignore[type-arg]
    def first(self) -> Any:
        return self[0]


def _counts(x: torch.Tensor, held: Any) -> Any:
    return x + (1 if 3 in held else 2), len(held)


@pytest.mark.parametrize("cls", [FrameSet, FrameList])
def test_a_list_or_set_subclass_argument_that_changed_gives_eagers_answer(cls: type) -> None:
    # Guarded by its class only: its contents folded into the code went stale (3 in s stayed
    # True after s lost 3). Reading them now runs the statement eagerly.
    compiled = compile_api.compile(_counts, backend="eager")
    held = cls([3])
    for _ in range(2):
        got, expected = compiled(torch.ones(1), held), _counts(torch.ones(1), held)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1] == expected[1]
        held.clear()
