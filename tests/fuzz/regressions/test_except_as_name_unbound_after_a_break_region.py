"""``except E as e`` in a try block that runs eagerly at a graph break must unbind ``e`` when
the handler ends, as CPython's ``e = None; del e`` does; else the exception's traceback keeps the
frame alive in a cycle, and a generator suspended in that frame runs its ``finally`` only when
the garbage collector runs (eager: when ``fn`` returns).

Found by the CI slice with the ``builtin_misuse`` family (seed 2026, program 9, with
``py_objects``'s suspended generator; session 10). The transformed code's normal exit from the
handler is ``POP_EXCEPT; JUMP_FORWARD`` to the call of the resume function, skipping the
cleanup, and ``e`` is passed to ``__resume_at_<n>`` as a live local (CPython 3.11, main at
52bc417). torch.compile is no reference here: its run of this program raises an internal error.
Fixed in session 11: the region runs the handler's ``e = None; del e`` and exits after it
(breaks.region).
"""

from __future__ import annotations

from tests.fuzz.runner import check_source

SOURCE = """\
import torch
G = 0
GL = []
GT = torch.tensor(0.5)
LOG = []
def gen(v):
    try:
        yield v
        yield v
    finally:
        LOG.append('gen finally')
def two(a, b):
    return a + b
def fn(x, y, n, lst):
    g = gen(x)
    t = next(g)
    try:
        t = two(x)
    except TypeError as e:
        LOG.append(type(e).__name__)
    return (t + 1.0,)
"""

INPUTS = [{"x": [1.0, -2.0, 3.0], "y": [0.5, 0.5, 0.5], "n": 2, "lst": [0.5]}]


def test_generator_finally_runs_when_fn_returns_after_except_as() -> None:
    failure = check_source(SOURCE, "eager", INPUTS)
    assert failure is None, str(failure)
