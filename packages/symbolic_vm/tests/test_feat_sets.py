"""Sets: built and changed inside the compiled function, iterated in eager's order, and sets
passed in whose changes are written back after the graph (guarded by contents and order)."""

from __future__ import annotations

import pytest
import torch
from feat_support import compiled, fresh_counter
from vm_harness import check, run_vm

from symbolic_vm import Unsupported


def test_set_construction_and_membership():
    def fn(x):
        a = {3, 1, 2}
        b = set([2, 5, 5])
        c = set(k * 2 for k in range(4))
        d = {*a, *b}
        e = {k % 3 for k in range(10)}
        return x * len(a) + (4 in c) + (5 not in a), sorted(d), e, frozenset(b)

    check(fn, torch.randn(3))


def test_mutating_methods_and_iteration_order_match_eager():
    def fn(x):
        s = {10, 3}
        s.add(7)
        s.add(3)
        s.discard(10)
        s.discard(99)
        s.remove(7)
        s.update([1, 2], (9, 33))
        popped = s.pop()
        order = [k for k in s]
        total = x
        for k in s:
            total = total + k
        s.clear()
        return total, order, popped, s, bool(s)

    check(fn, torch.randn(2))


def test_set_operators_and_in_place_operators():
    def fn(x):
        a, b = {1, 2, 3}, {2, 3, 4}
        union, inter, diff, sym = a | b, a & b, a - b, a ^ b
        c = a
        c |= {8}
        c -= {1}
        c &= {2, 3, 8, 100}
        return x + len(union), sorted(inter), diff, sym, a is c, a, a <= {2, 3, 8, 9}

    check(fn, torch.randn(2))


def test_set_methods_returning_values():
    def fn(x):
        a = {"b", "a", "c"}
        return (
            x,
            a.union({"d"}),
            a.intersection(["a", "z"]),
            a.difference({"a"}),
            a.symmetric_difference({"a", "q"}),
            a.issubset({"a", "b", "c", "d"}),
            a.isdisjoint({"z"}),
            a.copy() == a,
            list(a),
        )

    check(fn, torch.randn(2))


def test_set_of_strings_iterates_in_eager_order():
    def fn(x, names):
        seen = set()
        out = []
        for n in names:
            if n not in seen:
                seen.add(n)
                out.append(n)
        return x * len(seen), out, list(seen)

    check(fn, torch.randn(2), ["relu", "gelu", "relu", "tanh", "gelu"])


def test_mutating_a_set_passed_in_is_replayed_after_the_graph():
    def fn(x, s):
        s.add(5)
        s.discard(1)
        s |= {7}
        return x + len(s)

    # check() also compares the argument after the call: {2, 5, 7} as eager leaves it.
    check(fn, torch.randn(2), {1, 2})


def test_reading_a_set_passed_in_without_changing_it():
    def fn(x, s):
        return x * sum(s), 3 in s, sorted(s)

    compiled_run = check(fn, torch.randn(2), {1, 2, 3})
    assert compiled_run.guard({"x": torch.randn(2), "s": {1, 2, 3}})
    assert not compiled_run.guard({"x": torch.randn(2), "s": {1, 2}})


def test_changed_set_contents_recompile_through_compile_api():
    def fn(x, s):
        s.add(0)
        return x + len(s)

    counter = fresh_counter()
    compiled_fn = compiled(fn, counter)
    x = torch.randn(2)
    for contents in ({1}, {1}, {1, 2}, {0, 1, 2}):
        expected_set, got_set = set(contents), set(contents)
        torch.testing.assert_close(compiled_fn(x, got_set), fn(x, expected_set))
        assert got_set == expected_set
    assert counter.count == 3  # {1} twice shares one entry


def test_mutating_the_same_set_between_calls_recompiles():
    def fn(x, s):
        return x + len(s)

    counter = fresh_counter()
    compiled_fn = compiled(fn, counter)
    s, x = {1}, torch.randn(2)
    torch.testing.assert_close(compiled_fn(x, s), x + 1)
    s.add(2)
    torch.testing.assert_close(compiled_fn(x, s), x + 2)
    assert counter.count == 2


def test_set_errors_eager_would_raise_are_unsupported():
    def remove_missing(x):
        s = {1}
        s.remove(2)
        return x

    def pop_empty(x):
        return x, set().pop()

    for fn in (remove_missing, pop_empty):
        with pytest.raises(Unsupported, match="KeyError"):
            run_vm(fn, torch.randn(2))


def test_a_set_of_tensors_is_unsupported_not_guessed():
    def fn(x):
        return {x, x + 1}

    with pytest.raises(Unsupported):
        run_vm(fn, torch.randn(2))


def test_iteration_order_of_larger_string_and_int_sets_matches_eager():
    words = [f"w{k}" for k in range(40)]

    def fn(x, words):
        a = set(words[:25])
        b = {w for w in words[10:]}
        a.update(b)
        a.discard("w3")
        c = (a - {"w5", "w6"}) | {"extra", "w0"}
        d = {k * 8 for k in range(30)}  # ints colliding in a small table
        d |= {1, 9, 17}
        return x, list(a), list(c), list(b & a), list(d), [d.pop() for _ in range(3)]

    check(fn, torch.randn(1), words)
