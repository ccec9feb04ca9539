"""Generators made inside the compiled function run lazily, as in Python: a generator
function's frame is interpreted up to each yield when the consumer asks (for loops, next(),
list(), zip/enumerate/map/filter, any/all), so graph ops and side effects keep program order."""

from __future__ import annotations

import pytest
import torch
from feat_support import compiled, fresh_counter
from vm_harness import check, run_vm

from symbolic_vm import Unsupported


def powers(x, n):
    for i in range(n):
        yield x**i


def test_generator_function_in_a_for_loop_is_inlined_in_one_graph():
    def fn(x):
        total = torch.zeros_like(x)
        for p in powers(x, 3):
            total = total + p
        return total

    compiled_run = check(fn, torch.randn(4))
    assert compiled_run.graph_count == 1


def test_list_tuple_and_sum_of_a_generator():
    def fn(x):
        return list(powers(x, 2)), tuple(powers(x + 1, 3)), sum(powers(x, 3))

    check(fn, torch.randn(3))


def test_next_resumes_only_as_far_as_asked():
    # The generator's appends and the consumer's are side effects on the argument, replayed
    # after the graph: their interleaving must match eager, and "not reached" never happens.
    def fn(x, out):
        def gen():
            out.append("start")
            yield x + 1
            out.append("after first")
            yield x * 2
            out.append("not reached")

        g = gen()
        a = next(g)
        out.append("consumer")
        b = next(g)
        return a + b

    check(fn, torch.randn(3), [])


def test_generator_with_an_infinite_loop_is_consumed_lazily():
    def counter_gen(x):
        k = 0
        while True:
            yield x + k
            k += 1

    def fn(x):
        out = []
        for i, v in zip(range(3), counter_gen(x)):
            out.append(v * i)
        g = counter_gen(x)
        first = [next(g) for _ in range(2)]
        return out, first, list(enumerate(zip("ab", counter_gen(x))))

    check(fn, torch.randn(2))


def test_enumerate_map_filter_over_generators():
    def fn(x):
        doubled = list(map(lambda t: t * 2, powers(x, 3)))
        kept = list(filter(lambda t: t is not None, powers(x, 2)))
        return [i * t for i, t in enumerate(powers(x, 3), start=1)], doubled, kept

    check(fn, torch.randn(3))


def test_any_and_all_stop_pulling_early_like_python():
    def fn(x, seen):
        def flags():
            for k in range(5):
                seen.append(k)
                yield k >= 2

        return x + int(any(flags())), all(k < 1 for k in range(3))

    check(fn, torch.randn(2), [])


def test_generator_expressions_with_tensors():
    def fn(x, ys):
        total = sum(y * x for y in ys)
        prods = tuple(x @ y for y in ys if y.shape[0] == 3)
        return total, prods, max(y.shape[0] for y in ys)

    check(fn, torch.randn(3), [torch.randn(3), torch.randn(3)])


def test_generator_using_a_closure_and_a_method():
    class Scaler:
        def __init__(self, k):
            self.k = k

        def scaled(self, xs):
            for x in xs:
                yield x * self.k

    def fn(a, b):
        s = Scaler(3.0)
        return [t + 1 for t in s.scaled([a, b])]

    check(fn, torch.randn(2), torch.randn(2))


def test_exhausted_generator_with_next_is_unsupported_not_guessed():
    def fn(x):
        g = powers(x, 1)
        next(g)
        return next(g)

    with pytest.raises(Unsupported, match="StopIteration"):
        run_vm(fn, torch.randn(2))


def test_generator_through_compile_api_recompiles_when_its_length_changes():
    def fn(x, n):
        return [p + 1 for p in powers(x, n)]

    counter = fresh_counter()
    compiled_fn = compiled(fn, counter)
    x = torch.randn(3)
    for n in (2, 2, 3):
        for got, expected in zip(compiled_fn(x, n), fn(x, n), strict=True):
            torch.testing.assert_close(got, expected)
    assert counter.count == 2


def test_contextmanager_generator_is_entered_and_exited_in_order():
    import contextlib

    @contextlib.contextmanager
    def scaled(log, k):
        log.append(f"enter {k}")
        yield k * 2
        log.append(f"exit {k}")

    def fn(x, log):
        with scaled(log, 3) as a:
            with scaled(log, k=5) as b:
                y = x * a + b
            log.append("between")
        return y

    compiled_run = check(fn, torch.randn(3), [])
    assert compiled_run.graph_count == 1


def test_contextmanager_that_yields_twice_is_unsupported_not_guessed():
    import contextlib

    @contextlib.contextmanager
    def twice():
        yield 1
        yield 2

    def fn(x):
        with twice():
            x = x + 1
        return x

    with pytest.raises(Unsupported, match="didn't stop"):
        run_vm(fn, torch.randn(2))


def test_yield_from_a_generator_and_a_list_with_its_return_value():
    def inner(x, log):
        log.append("inner start")
        yield x + 1
        yield x + 2
        log.append("inner end")
        return 10

    def outer(x, log):
        r = yield from inner(x, log)
        yield x * r
        yield from [x - 1, x - 2]

    def fn(x, log):
        g = outer(x, log)
        first = next(g)
        log.append("consumer")
        return [first, *g]

    compiled_run = check(fn, torch.randn(3), [])
    assert compiled_run.graph_count == 1


def accumulate(x):
    total = x * 0
    while True:
        step = yield total
        if step is None:
            return total
        total = total + step


def test_send_resumes_the_paused_yield_with_the_value():
    def fn(x):
        g = accumulate(x)
        first = next(g)
        a = g.send(x + 1)
        b = g.send(x * 3)
        return first, a, b

    compiled_run = check(fn, torch.randn(3))
    assert compiled_run.graph_count == 1


def test_send_through_yield_from_reaches_the_inner_generator():
    def outer(x):
        result = yield from accumulate(x)
        yield result * 10

    def fn(x):
        g = outer(x)
        next(g)
        g.send(x + 2)
        g.send(x)
        return g.send(None)  # the inner generator returns; outer yields result * 10

    check(fn, torch.randn(3))


def test_send_of_a_value_to_a_just_started_generator_is_left_to_python():
    def fn(x):
        g = accumulate(x)
        return g.send(x)  # TypeError in eager

    with pytest.raises(Unsupported, match="just-started"):
        run_vm(fn, torch.randn(2))


def test_send_into_a_generator_that_returns_is_unsupported_not_guessed():
    def fn(x):
        g = accumulate(x)
        next(g)
        return g.send(None)  # StopIteration in eager

    with pytest.raises(Unsupported, match="StopIteration"):
        run_vm(fn, torch.randn(2))
