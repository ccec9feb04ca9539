"""A ``torch._check`` that fails inside a compiled graph must behave as in eager: keep the side
effects the program made before it, and be caught by the program's own ``except``.

Found by the ``data_dependent`` family (seed 601, session 10: programs 7 and 27, eager and
aot_eager; seed 605, programs 7/12/16/38): ``LOG.append(...)`` then ``torch._check(c <= 1)`` on a
data-dependent count ``c`` (``capture_scalar_outputs`` on, so the check is a runtime assertion in
the graph). Eager appends, then raises RuntimeError. Compiled, the graph raised before the
frame's replayed side effects ran, so ``LOG`` stayed empty, and a check inside ``try`` raised
outside it. torch.compile 2.13 does the same (checked by hand, 2026-11-27). Fixed in session 11
(symbolic_vm.runtime_checks): such a check after side effects or inside a handler is a graph
break, so it runs eagerly where eager runs it.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

import compile_api
from tests.conftest import TORCH_2_13, GraphCounter
from tests.fuzz.runner import check_source

SOURCE = """\
import torch
G = 0
GL = []
GT = torch.tensor(0.5)
LOG = []
COMPILE_CONFIG = {'capture_scalar_outputs': True, 'capture_dynamic_output_shape_ops': False}
EXPECTED_EXCEPTION_TYPES = ('RuntimeError',)
def fn(x, y, n, lst):
    c = int((x > 0).sum().item())
    LOG.append(('before check', c))
    torch._check(c <= 1)
    return (x[:c].sum() + y,)
"""

INPUTS = [
    {"x": [1.0, -2.0, -3.0], "y": [0.5, 0.5, 0.5], "n": 2, "lst": [0.5]},
    {"x": [1.0, 2.0, -3.0], "y": [0.5, 0.5, 0.5], "n": 2, "lst": [0.5]},
]


def test_failed_check_in_the_graph_keeps_earlier_side_effects() -> None:
    failure = check_source(SOURCE, "eager", INPUTS)
    assert failure is None, str(failure)


CAUGHT = """\
import torch
G = 0
GL = []
GT = torch.tensor(0.5)
LOG = []
COMPILE_CONFIG = {'capture_scalar_outputs': True, 'capture_dynamic_output_shape_ops': False}
def fn(x, y, n, lst):
    c = int((x > 0).sum().item())
    t = x + 1.0
    try:
        torch._check(c <= 2)
        t = t * 2.0
    except RuntimeError:
        t = t - 100.0
    return (t + y,)
"""


def test_failed_check_inside_try_is_caught_by_the_programs_except() -> None:
    inputs = [{"x": [1.0, 2.0, 3.0], "y": [1.0, 1.0, 1.0], "n": 2, "lst": [0.5]}]
    failure = check_source(CAUGHT, "eager", inputs)
    assert failure is None, str(failure)


def check_of_an_int_caught(x: torch.Tensor, n: int) -> tuple[torch.Tensor, list[str]]:
    log = []
    t = x + 1.0
    try:
        torch._check(n <= 2)
        t = t * 2.0
    except RuntimeError as e:
        log.append(str(e))
    return t, log


@pytest.mark.parametrize("dynamic", [False, True])
def test_failed_check_of_an_int_is_caught_as_eager(dynamic: bool) -> None:
    # the check of a constant (or of a dynamic int: guarded, as torch decides it) fails while
    # tracing, in the trace: before, it was a graph assertion raising outside the try
    x = torch.tensor([1.0, -2.0])
    counter = GraphCounter()
    ours = compile_api.compile(check_of_an_int_caught, backend=counter, dynamic=dynamic)
    for n in (3, 4, 1):
        expected = check_of_an_int_caught(x, n)
        got = ours(x, n)
        assert torch.equal(got[0], expected[0]) and got[1] == expected[1]
    if dynamic:
        assert counter.count == 2  # one per outcome of the guard on n <= 2, not per value


def test_failed_check_of_an_int_is_caught_in_as_many_graphs_as_torch() -> None:
    # torch.compile 2.13 catches it too, with a message of its own (shortened); with
    # dynamic=True it fails to compile the frame (a RuntimeError from its fake call)
    x = torch.tensor([1.0, -2.0])
    counter = GraphCounter()
    ours = compile_api.compile(check_of_an_int_caught, backend=counter)
    for n in (3, 1):
        assert ours(x, n)[1] == check_of_an_int_caught(x, n)[1]
    assert counter.count == 2
    if not TORCH_2_13:  # the reference behaviour is torch 2.13's (2.11 on the GPU machine differs)
        return
    torch._dynamo.reset()
    theirs_counter = GraphCounter()
    theirs = torch.compile(check_of_an_int_caught, backend=theirs_counter)
    for n in (3, 1):
        expected = check_of_an_int_caught(x, n)
        got = theirs(x, n)
        assert torch.equal(got[0], expected[0]) and len(got[1]) == len(expected[1])
    assert theirs_counter.count == 2
