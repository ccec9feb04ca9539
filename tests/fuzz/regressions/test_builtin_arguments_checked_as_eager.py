"""Builtins called with the wrong number of arguments or keywords they do not take raise eager's
TypeError inside the compiled code, where the program's ``except`` sees it.

Found by the ``builtin_misuse`` family (seed 602, session 10): ``abs(x, 1)``, ``all(lst, 1)``,
``sum(lst, start=1.0, extra=2)``, ``getattr(o, 'v', 1, 2)`` and ``range(n, step=1)`` returned a
value (the extra argument or keyword was dropped), ``min()`` raised ValueError, and
``getattr(o)``, ``setattr(o, 'v')``, ``len(x, 1)``, ``range(1, 2, 3, 4)`` and ``callable()``
crashed inside the VM (the frame ran eagerly with a warning); ``tuple(1, 2)`` raised another
TypeError message (session 11).
"""

from __future__ import annotations

import pytest

from tests.fuzz.runner import check_source

SOURCE = """\
import torch
G = 0
GL = []
GT = torch.tensor(0.5)
LOG = []
class Thing:
    def __init__(self, v):
        self.v = v
def fn(x, y, n, lst):
    o = Thing(x * 2.0)
    t = x + 1.0
    try:
        q = EXPR
        LOG.append(('ok', type(q).__name__))
    except Exception as e:
        LOG.append((type(e).__name__, str(e)))
        t = t + y
    return (t,)
"""

INPUTS = [
    {"x": [1.0, -2.0, 3.0], "y": [0.5, 0.5, 0.5], "n": 2, "lst": [0.5, -1.0]},
    {"x": [1.5, -2.0, 0.25, 4.0], "y": [0.5, 1.5, 0.5, -1.0], "n": 3, "lst": [0.25]},
]

CASES = [
    "abs(x, 1)",
    "all(lst, 1)",
    "sum(lst, start=1.0, extra=2)",
    "getattr(o, 'v', 1, 2)",
    "range(n, step=1)",
    "min()",
    "max(lst, bogus=1)",
    "getattr(o)",
    "setattr(o, 'v')",
    "len(x, 1)",
    "range(1, 2, 3, 4)",
    "callable()",
    "sorted(lst, lst)",
    "divmod(n)",
    # session 11 (builtin_misuse seed 602, program 7): the VM iterated the first argument and
    # raised "'int' object is not iterable" inside the program's try
    "tuple(1, 2)",
    "set(lst, lst)",
    "bool(1, 2)",
    "reversed()",
]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("expr", CASES)
def test_builtin_called_with_wrong_arguments_raises_eagers_type_error(
    expr: str, backend: str
) -> None:
    failure = check_source(SOURCE.replace("EXPR", expr), backend, INPUTS)
    assert failure is None, str(failure)


@pytest.mark.parametrize("expr", ["abs(x, 1)", "range(n, step=1)", "min()"])
def test_torch_compile_raises_the_same_type_error(expr: str) -> None:
    # the reference for the cases torch.compile gets right (it returns a value for
    # getattr(o, 'v', 1, 2) and crashes on all(lst, 1) and the sum keyword)
    import importlib.util
    import os
    import tempfile

    import torch

    path = os.path.join(tempfile.mkdtemp(), "builtin_args_ref.py")
    with open(path, "w") as f:
        f.write(SOURCE.replace("EXPR", expr))
    mods = []
    for i in range(2):
        spec = importlib.util.spec_from_file_location(f"builtin_args_ref{i}", path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mods.append(mod)
    args = (torch.tensor([1.0, -2.0, 3.0]), torch.tensor([0.5, 0.5, 0.5]), 2, [0.5, -1.0])
    eager = mods[0].fn(*args)
    torch._dynamo.reset()
    compiled = torch.compile(mods[1].fn, backend="eager")(*args)
    torch._dynamo.reset()
    assert torch.equal(eager[0], compiled[0])
    assert mods[0].LOG == mods[1].LOG


@pytest.mark.parametrize("expr", ["round(n, 'a')", "divmod(n, 'a')", "pow(n, 'a')"])
def test_builtin_on_a_dynamic_int_and_a_wrong_type_raises_in_the_programs_try(expr: str) -> None:
    # builtin_misuse, seed 613, program 12 (call 3, after n became dynamic): the call went into
    # the graph and raised TypeError when the graph ran, outside the program's try
    source = SOURCE.replace("EXPR", expr)
    source = source.replace("LOG = []\n", "LOG = []\nCOMPILE_DYNAMIC = True\n")
    failure = check_source(source, "eager", INPUTS)
    assert failure is None, str(failure)
