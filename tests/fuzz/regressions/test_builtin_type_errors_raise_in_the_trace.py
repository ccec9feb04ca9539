"""A builtin or method that eager fails with a TypeError/IndexError on its argument types or
count should raise that error inside the compiled code, not crash the VM.

Found by the ``builtin_misuse`` family (seed 602, session 10). Each case below is caught by
the program's own ``except``; Strata's VM raises the error while tracing instead (an internal
error: the frame runs eagerly with a "Strata could not compile" warning, so results are right,
but the frame is never compiled). ``lst.pop(1, 2)`` was worse: the compiled call popped and
returned a value where eager raises TypeError (a wrong result); the list/dict/set method cases
pass since their arguments are checked. Open: the type checks in the builtins' implementations.
"""

from __future__ import annotations

import pytest

from tests.fuzz.regressions.test_builtin_arguments_checked_as_eager import INPUTS, SOURCE
from tests.fuzz.runner import check_source

_INTERNAL = "the VM raises eager's error while tracing (internal error, frame run eagerly)"

CASES = [
    # list/dict/set methods: their argument count and keywords are checked against the
    # method's signature first (methods._check_arguments)
    "lst.pop(1, 2)",
    "lst.append()",
    "{}.get()",
    pytest.param("isinstance(x, 3)", marks=pytest.mark.xfail(strict=True, reason=_INTERNAL)),
    pytest.param("isinstance(n, (str, 3))", marks=pytest.mark.xfail(strict=True, reason=_INTERNAL)),
    pytest.param("len(n)", marks=pytest.mark.xfail(strict=True, reason=_INTERNAL)),
    pytest.param("len(x.sum())", marks=pytest.mark.xfail(strict=True, reason=_INTERNAL)),
    pytest.param("abs('a')", marks=pytest.mark.xfail(strict=True, reason=_INTERNAL)),
    pytest.param("hasattr(o, 1)", marks=pytest.mark.xfail(strict=True, reason=_INTERNAL)),
    pytest.param("x.size(5)", marks=pytest.mark.xfail(strict=True, reason=_INTERNAL)),
    pytest.param("{}[[n]]", marks=pytest.mark.xfail(strict=True, reason=_INTERNAL)),
]


@pytest.mark.parametrize("expr", CASES)
def test_failing_builtin_call_raises_in_the_compiled_code(expr: str) -> None:
    failure = check_source(SOURCE.replace("EXPR", expr), "eager", INPUTS)
    assert failure is None, str(failure)
