"""A builtin or method that eager fails with a TypeError/IndexError on its argument types or
count raises that error inside the compiled code, with eager's type and message, where the
program's own ``except`` sees it.

Found by the ``builtin_misuse`` family (seed 602, session 10): the VM's handlers failed inside
their own code on these arguments (an internal error: the frame ran eagerly with a "Strata could
not compile" warning), and ``lst.pop(1, 2)`` popped and returned a value where eager raises.
The list/dict/set method cases are checked against the method's signature first
(methods._check_arguments); the others by symbolic_vm.eager_errors (session 11): the call whose
handler failed is asked again of the real builtin on the arguments' real values, and what that
raises is raised in the trace. ``hasattr(o, 1)`` on an object made in the trace (no real value
to ask with) is a graph break: the call runs eagerly and raises itself.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch._dynamo

import compile_api
from tests.conftest import TORCH_2_13, GraphCounter
from tests.fuzz.regressions.test_builtin_arguments_checked_as_eager import INPUTS, SOURCE
from tests.fuzz.runner import check_source

CASES = [
    "lst.pop(1, 2)",
    "lst.append()",
    "{}.get()",
    "isinstance(x, 3)",
    "isinstance(n, (str, 3))",
    "len(n)",
    "len(x.sum())",
    "abs('a')",
    "hasattr(o, 1)",
    "x.size(5)",
    "{}[[n]]",
]


@pytest.mark.parametrize("expr", CASES)
def test_failing_builtin_call_raises_in_the_compiled_code(expr: str) -> None:
    failure = check_source(SOURCE.replace("EXPR", expr), "eager", INPUTS)
    assert failure is None, str(failure)


def misuses_caught(x: torch.Tensor, n: int) -> tuple[torch.Tensor, list[str]]:
    # the three misuses torch.compile 2.13 also raises in the trace (it gets isinstance(x, 3),
    # len(n), len(x.sum()) and x.size(5) wrong: they escape its compiled call)
    log = []
    t = x + 1.0
    try:
        isinstance(n, (str, 3))
    except TypeError as e:
        log.append(str(e))
        t = t * 2.0
    try:
        abs("a")  # type: ignore[arg-type]
    except TypeError as e:
        log.append(str(e))
        t = t - 1.0
    try:
        {}[[n]]  # type: ignore[index]
    except TypeError as e:
        log.append(str(e))
        t = t + x
    return t, log


def test_caught_misuses_give_eagers_messages_in_one_graph_like_torch() -> None:
    x = torch.tensor([1.0, -2.0, 3.0])
    expected = misuses_caught(x, 2)
    counter = GraphCounter()
    ours = compile_api.compile(misuses_caught, backend=counter, fullgraph=True)(x, 2)
    assert torch.equal(ours[0], expected[0]) and ours[1] == expected[1]
    assert counter.count == 1
    if not TORCH_2_13:  # the reference behaviour is torch 2.13's (2.11 on the GPU machine differs)
        return
    torch._dynamo.reset()
    theirs_counter = GraphCounter()
    theirs = torch.compile(misuses_caught, backend=theirs_counter, fullgraph=True)(x, 2)
    assert torch.equal(theirs[0], expected[0]) and theirs[1] == expected[1]
    assert theirs_counter.count == 1


def len_of_an_int(x: torch.Tensor, n: int) -> tuple[torch.Tensor, int]:
    y = x * 2.0
    return y, len(n)  # type: ignore[arg-type]


def size_of_a_missing_dim(x: torch.Tensor) -> int:
    y = x * 2.0
    return y.size(5)


@pytest.mark.parametrize(
    ("fn", "args"),
    [(len_of_an_int, (torch.ones(3), 2)), (size_of_a_missing_dim, (torch.ones(2, 3),))],
)
def test_uncaught_misuse_raises_eagers_error(fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    # compiled (the multiplication in a graph; before, the VM's own error ran it all eagerly)
    with pytest.raises((TypeError, IndexError)) as eager:
        fn(*args)
    counter = GraphCounter()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "Strata could not compile" fallback
        with pytest.raises(eager.type, match=f"^{re.escape(str(eager.value))}$"):
            compile_api.compile(fn, backend=counter)(*args)
    assert counter.count == 1


def test_uncaught_misuse_under_fullgraph_names_the_users_line() -> None:
    line = len_of_an_int.__code__.co_firstlineno + 2
    with pytest.raises(compile_api.Unsupported, match=rf"{re.escape(__file__)}:{line}"):
        compile_api.compile(len_of_an_int, backend="eager", fullgraph=True)(torch.ones(3), 2)
