"""A graph break after a ``try`` whose ``except`` clause ran compiles the code after it.

3.12+ put an except clause after the function's return and jump back to the code after the
``try``. A resume function that enters there sees that jump on its main line; it closes no
loop, so a later break must not make the rest of the function run as a Python region.
"""

from __future__ import annotations

import torch

import compile_api


def _after_except(x: torch.Tensor, log: list[int]) -> torch.Tensor:
    y = x * 2
    try:
        log.append(1)
        print("a break inside the try block")  # (the VM traces the ZeroDivisionError itself)
        y = y + 1 // (len(log) * 0)  # ZeroDivisionError: the except clause runs
    except ZeroDivisionError:
        log.append(2)
    z = y + 1
    print("a second break")
    if z.shape[0] > 2:
        z = z * 3
    return z - 1


def test_code_after_an_except_clause_and_a_break_is_compiled(counter) -> None:
    fn = compile_api.compile(_after_except, backend=counter)
    x = torch.randn(4)
    log: list[int] = []
    expected_log: list[int] = []
    torch.testing.assert_close(fn(x, log), _after_except(x, expected_log))
    assert log == expected_log
    # before the try; after the except (up to the print); after the print
    assert counter.count == 3, [g.code for g in counter.graphs]


def _loop_holding_a_try(
    x: torch.Tensor, y: torch.Tensor, lst: list[int]
) -> tuple[torch.Tensor, ...]:
    t = x * 2
    for _ in range(len(lst)):
        try:
            t.mul_(0.5)
            raise ValueError("boom")
        except ValueError:
            t = t + x.sum()
        lst.append(int(bool(y.sum() > 0)))  # data-dependent: a break inside the loop
    u = y + x
    print("a second break")
    return t, u * 2


def test_a_break_in_a_loop_holding_a_try_compiles_the_code_around_the_loop(counter) -> None:
    fn = compile_api.compile(_loop_holding_a_try, backend=counter)
    x, y = torch.randn(3), torch.randn(3)
    got, expected = fn(x, y, [1, 2]), _loop_holding_a_try(x, y, [1, 2])
    torch.testing.assert_close(got, expected)
    assert counter.count == 3
