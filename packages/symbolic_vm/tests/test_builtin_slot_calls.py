"""The C methods of builtin containers called by name, as PyTorch's own make_dynamo_test tests
call them (``p.__add__(q)``, ``set.__and__(p, q)``, ``list.__eq__(p, r)``,
``frozenset.issubset(q, p)``), and unittest's assert methods traced as the Python they are.

Each program runs eagerly and through the VM (fullgraph) on copies of the same inputs: the same
results, the same NotImplemented where an explicit slot gives it (``[1].__eq__((1,))``), and the
same TypeError (type and message) where eager raises one, caught inside the program.
"""

from __future__ import annotations

import unittest
from typing import Any

import pytest
import torch
from vm_harness import check

import compile_api
from symbolic_vm import Unsupported

pytestmark = pytest.mark.usefixtures("errors_raise")


def _errors(*calls: Any) -> list[Any]:
    """Each call's result, or its TypeError/ValueError/IndexError as (type name, message)."""
    out: list[Any] = []
    for fn, *args in calls:
        try:
            out.append(fn(*args))
        except (TypeError, ValueError, IndexError) as exc:
            out.append((type(exc).__name__, str(exc)))
    return out


def test_explicit_operator_slots_of_lists_and_tuples_match_eager() -> None:
    def fn(t: torch.Tensor) -> Any:
        p, q = list("abc"), ("a", "b")
        r = p.__iadd__("d")
        return (
            p.__add__(["e"]), p.__eq__(q), p.__eq__(list("abcd")), p.__lt__(["b"]), r is p,
            q.__add__(("c",)), q.__mul__(2), q.__ne__(("a",)), q.__ge__(("a",)),
            [t].__add__([t * 2]), list.__eq__(p, p), tuple.__add__(q, q),
        )

    check(fn, torch.randn(3))


def test_explicit_slots_raise_eagers_type_errors() -> None:
    def fn() -> list[Any]:
        p, q = list("ab"), tuple("ab")
        return _errors(
            (p.__add__,), (p.__add__, 1), (q.__mul__, 2.5), (q.__getitem__,),
            (q.__getitem__, 5), (p.__contains__, 1, 2), (set.__and__, frozenset("a"), {1}),
        )

    check(fn)


def test_protocol_slots_and_iterator_slots_match_eager() -> None:
    def fn() -> Any:
        p = list("abc")
        it = p.__iter__().__iter__()
        first = next(it)
        return (
            first, next(it), p.__contains__("a"), p.__getitem__(1), p.__len__(),
            tuple("xy").__contains__("z"),
        )

    check(fn)


def test_set_and_frozenset_slots_and_methods_match_eager() -> None:
    def fn() -> Any:
        p, q = set("abc"), frozenset("bef")
        return (
            set.__and__(p, q), p.__or__(q), p.__and__(1), q.__sub__(p), frozenset.__xor__(q, p),
            q.copy() is q, frozenset.copy(q), q.issubset("abcdef"), q.issuperset(frozenset("b")),
            q.union("x"), p.__eq__(q), q == frozenset("bef"), q != p, p == set("cab"),
            q < frozenset("bxef"), q == 1, p != [1], set.__contains__(p, "a"),
        )

    check(fn)


def test_frozensets_format_in_f_strings_as_eager() -> None:
    def fn() -> Any:
        p = frozenset("abc")
        q = p & frozenset("b")
        return f"{p} != {q}", f"{q!r:>20}"

    check(fn)


def test_set_methods_with_wrong_arguments_raise_eagers_type_error() -> None:
    def fn() -> list[Any]:
        p, q = set("abc"), frozenset("ab")
        return _errors(
            (p.issubset,), (p.issubset, 1), (p.issubset, [[]]), (p.copy, 1), (q.issubset, 1),
            (frozenset.copy, q, 1), (set.__and__, q, p), (list("ab").extend, 1),
        )

    check(fn)


def test_tuple_new_argument_errors_match_eager() -> None:
    def fn() -> list[Any]:
        return _errors(
            (lambda: tuple.__new__(tuple, [1, 2], extra=1),), (tuple.__new__, tuple, [1], [2]),
            (tuple.__new__, tuple, [1, 2]),
        )

    check(fn)


def test_tuple_count_and_index_errors_match_eager() -> None:
    def fn() -> list[Any]:
        p = tuple("abcab")
        return _errors((p.count,), (p.count, "a"), (p.index, "e"), (p.count, 2, 3), (p.index,))

    check(fn)


class _Case(unittest.TestCase):
    def runTest(self) -> None:  # noqa: N802 - unittest's name
        pass

    def passing(self) -> list[str]:
        p = list("abc")
        self.assertRaises(TypeError, p.append)
        self.assertRaises(TypeError, p.__add__, 1)
        self.assertTrue(p.__contains__("a"), "a in p")
        self.assertIn("b", p)
        self.assertIsNone(p.append("d"))
        return p

    def failing_assert_raises(self) -> None:
        self.assertRaises(TypeError, list("ab").append, 1)  # nothing raised: AssertionError

    def failing_assert_true(self) -> None:
        self.assertTrue(frozenset("ab") == frozenset("b"), "sets differ")


def test_unittest_asserts_that_pass_trace_in_one_graph() -> None:
    case = _Case()
    check(case.passing)


@pytest.mark.parametrize("name", ["failing_assert_raises", "failing_assert_true"])
def test_failing_unittest_asserts_still_raise_eagers_assertion_error(name: str) -> None:
    case = _Case()
    with pytest.raises(AssertionError) as eager:
        getattr(case, name)()
    compile_api.reset()
    with pytest.raises(AssertionError) as compiled:  # at a graph break: eager's error
        compile_api.compile(getattr(case, name), backend="eager")()
    assert str(compiled.value) == str(eager.value)
    compile_api.reset()
    with pytest.raises(Unsupported, match="AssertionError"):  # never a silent pass
        compile_api.compile(getattr(case, name), backend="eager", fullgraph=True)()


class _SetSubclass(set):  # type: ignore[type-arg]
    pass


def test_plain_set_subclass_instances_made_in_the_trace_behave_as_eager() -> None:
    from collections.abc import Iterable

    def fn() -> Any:
        p, q = map(_SetSubclass, ["abc", "bef"])
        p.add("x")
        p.discard("x")
        return (
            type(p & q), p & q, p - q, type(p.copy()), p == _SetSubclass("abc"),
            p == frozenset("abc"), _SetSubclass.__and__(p, q), isinstance(p, _SetSubclass),
            isinstance(p, Iterable), type(p) is _SetSubclass, f"{p & q} != {_SetSubclass('b')}",
            p < _SetSubclass("abcd"), "a" in p, len(p), p.issubset("abcd"),
        )

    check(fn)


def test_a_set_subclass_instance_leaving_the_frame_runs_eagerly() -> None:
    def fn() -> Any:
        return _SetSubclass("ab")

    compile_api.reset()
    result = compile_api.compile(fn, backend="eager")()
    assert type(result) is _SetSubclass and result == fn()
    compile_api.reset()
    with pytest.raises(Unsupported, match="set subclass"):
        compile_api.compile(fn, backend="eager", fullgraph=True)()


def test_sets_against_non_sets_fold_as_eager() -> None:
    def fn() -> Any:
        p, s, sub = frozenset("abc"), set("abc"), _SetSubclass("ab")
        d = dict.fromkeys("abe")
        return _errors(
            (lambda: p - 1,), (lambda: 1 | p,), (lambda: s & "ab",), (lambda: sub - 1,),
            (lambda: sub < 1,), (lambda: (p != d, s == d, p != ["a"], f"{p} == {d}"),),
        )

    check(fn)


class _PlainTuple(tuple):  # type: ignore[type-arg]
    pass


class _GrandchildTuple(_PlainTuple):
    pass


def test_plain_tuple_subclass_instances_made_in_the_trace_behave_as_eager() -> None:
    def fn() -> Any:
        t = _GrandchildTuple.__new__(_GrandchildTuple, [1, 2, 3])
        u = _GrandchildTuple([1, 2])
        return (
            type(t) is _GrandchildTuple, tuple(t), type(u), isinstance(u, _PlainTuple),
            u == (1, 2), len(u), u[0], f"{u}", u + (3,), list(u), _PlainTuple(), u,
        )

    check(fn)
