"""A compiled function given an exception object must not keep that exception alive (nor, through
its traceback, the frame that raised it and what that frame holds).

Found by the CI slice with the ``builtin_misuse`` family (seed 2026, program 9, session 10): the
family's ``fz_msg(e)`` helper, called from an except block that runs eagerly, is compiled with
an identity guard on ``e`` (``L['e'] is the TypeError with id ...``). The guard holds the
exception, its traceback holds the frame, and a generator suspended in that frame runs its
``finally`` only when the cache entry goes (eager: when ``fn`` returns). The same guard makes
``fz_msg`` recompile for every new exception until ``cache_size_limit``. torch.compile 2.13
does not keep it (checked by hand with this test's function, 2026-11-27). Fixed in session 11
(symbolic_vm.guard_plan): a builtin exception is guarded by its type and its args (an argument
that is not a constant by identity, weakly where it can be).
"""

from __future__ import annotations

import gc
import weakref

import torch

import compile_api


class Held:
    """Something the exception holds (a builtin exception object takes no weak reference;
    a program's own exception class is held weakly by the guard, and passes)."""


def classify(e: BaseException) -> str:
    return "keyword" if "keyword" in str(e) else "other"


def test_compiled_function_does_not_keep_its_exception_argument_alive() -> None:
    compile_api.reset()
    try:
        compiled = compile_api.compile(classify, backend="eager")
        held = Held()
        ref = weakref.ref(held)
        err = TypeError("f() takes no keyword arguments", held)
        del held
        assert compiled(err) == classify(err)
        del err
        gc.collect()
        assert ref() is None
    finally:
        compile_api.reset()


def test_compiled_function_of_an_exception_answers_as_eager() -> None:
    compile_api.reset()
    try:
        compiled = compile_api.compile(classify, backend="eager")
        for err in [TypeError("no keyword arguments"), ValueError("x"), KeyError("keyword")]:
            assert compiled(err) == classify(err)
        assert torch.is_grad_enabled()
    finally:
        compile_api.reset()
