"""itertools inside compiled code (symbolic_vm.stdlib.itertools_): each function over tensors
and constants equals eager, is captured whole, in no more graphs than torch.compile."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from stdlib_harness import check_whole

pytestmark = pytest.mark.usefixtures("errors_raise")


def _x() -> tuple[Any, ...]:
    return (torch.arange(4.0),)


CASES = {
    "chain": lambda x: list(itertools.chain([x], (x * 2, x + 1), [])),
    "chain_from_iterable": lambda x: sum(itertools.chain.from_iterable([[x], [x * 2, 3]])),
    "product": lambda x: [x * a + b for a, b in itertools.product([1, 2], [3, 4])],
    "product_repeat": lambda x: x * len(list(itertools.product([0, 1], repeat=3))),
    "permutations": lambda x: [x * a - b for a, b in itertools.permutations([1, 2, 3], 2)],
    "combinations": lambda x: [x * a - b for a, b in itertools.combinations([1, 2, 3], 2)],
    "accumulate": lambda x: list(itertools.accumulate([x, x * 2, x * 3])),
    "accumulate_func_initial": lambda x: list(
        itertools.accumulate([x, x + 1], operator.mul, initial=x)
    ),
    "islice": lambda x: list(itertools.islice([x, x + 1, x + 2, x + 3, x + 4], 1, 5, 2)),
    "islice_stop": lambda x: list(itertools.islice(iter([x, x * 2, x * 3]), 2)),
    "zip_longest": lambda x: list(itertools.zip_longest([x], [1, 2], fillvalue=x * 0)),
    "repeat": lambda x: sum(itertools.repeat(x, 3)),
    "count_bounded": lambda x: [x * i for i, _ in zip(itertools.count(2, 3), range(3))],
    "starmap": lambda x: list(itertools.starmap(torch.add, [(x, 1), (x, x)])),
    "pairwise": lambda x: [a - b for a, b in itertools.pairwise([x, x * 2, x * 4])],
    "takewhile_dropwhile": lambda x: (
        [x * v for v in itertools.takewhile(lambda v: v < 3, [1, 2, 3, 1])],
        [x * v for v in itertools.dropwhile(lambda v: v < 3, [1, 2, 3, 1])],
    ),
    "filterfalse_compress": lambda x: (
        [x * v for v in itertools.filterfalse(lambda v: v % 2, range(5))],
        list(itertools.compress([x, x + 1, x + 2], [1, 0, 1])),
    ),
    "cycle_bounded": lambda x: [x * v for v, _ in zip(itertools.cycle([1, 2]), range(5))],
    "groupby": lambda x: [(k, x * len(list(g))) for k, g in itertools.groupby("aabccc")],
    "groupby_key": lambda x: [
        (k, [x * v for v in g]) for k, g in itertools.groupby([1, 3, 2, 4, 5], key=lambda v: v % 2)
    ],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_itertools_function_matches_eager_in_one_graph(name: str) -> None:
    check_whole(CASES[name], _x)


def test_groupby_groups_handed_out_earlier_are_empty_as_in_eager() -> None:
    def f(x: torch.Tensor) -> Any:
        groups = list(itertools.groupby([1, 1, 2, 2, 2]))
        it = itertools.groupby([5, 5, 6])
        _, first = next(it)
        head = next(first)
        _, second = next(it)
        return [list(g) for _, g in groups], head, list(first), list(second), x + 1

    check_whole(f, _x)


def test_a_generator_feeding_chain_is_read_lazily_as_in_eager() -> None:
    def f(x: torch.Tensor, log: list[int]) -> Any:
        def gen() -> Iterator[torch.Tensor]:
            for i in range(3):
                log.append(i)
                yield x * i

        out = []
        for v in itertools.chain(gen(), [x]):
            log.append(-1)
            out.append(v)
        return out

    check_whole(f, lambda: (torch.ones(2), []))


def test_islice_reads_no_further_than_eager() -> None:
    def f(x: torch.Tensor) -> Any:
        it = iter([x, x + 1, x + 2, x + 3])
        head = list(itertools.islice(it, 1, 2))
        return head, list(it)

    check_whole(f, _x)
