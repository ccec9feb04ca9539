"""Fuzz find of the exceptions family (seed 501: 12 of 30 programs, eager and aot_eager).

A user exception class whose ``__init__`` calls ``super().__init__(msg)`` keeps only ``msg`` in
``args`` (BaseException.__new__ stores every constructor argument, BaseException.__init__ then
resets them). The VM resolved any C ``__init__`` reached through ``super()`` to a no-op, so a
compiled ``__init__`` frame (run at the break the tensor argument causes) left ``args`` with
both arguments: ``len(e.args)`` was 2 where eager reads 1, and an exception escaping ``fn``
carried the tensor in its args. The same no-op emptied a dict subclass made with
``super().__init__(**kw)``. Fixed in symbolic_vm.object_attrs.super_attr: an exception's
``__init__`` runs eagerly, dict's goes to object_model.call_slot.
"""

from __future__ import annotations

import pytest
import torch

import compile_api
from tests.fuzz.runner import check_source

SOURCE = """\
import torch
G = 0
GL = []
GT = torch.tensor(0.5)
LOG = []
EXPECTED_EXCEPTIONS = ('FzError',)
class FzError(Exception):
    def __init__(self, msg, t=None):
        super().__init__(msg)
        self.t = t

def fn(x, y, n, lst):
    try:
        raise FzError('fz', x)
    except FzError as e:
        LOG.append(('caught', len(e.args)))
    GL.append(n)
    x.add_(1.0)
    if n > 2:
        raise FzError('escape', x * 2.0) from KeyError('why', n)
    return (x * y,)
"""

INPUTS = [
    {"x": [0.4, -1.642], "y": [1.942, 1.26], "n": 5, "lst": [0.84]},
    {"x": [0.4, -1.642], "y": [1.942, 1.26], "n": 5, "lst": [0.84]},
    {"x": [-1.473, 1.66], "y": [0.396, -0.491], "n": 1, "lst": [-0.98]},
    {"x": [1.483, -0.631, 0.5], "y": [1.343, 0.087, 0.1], "n": 3, "lst": [-0.87]},
]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_exception_args_after_super_init_match_eager(backend: str) -> None:
    failure = check_source(SOURCE, backend, INPUTS)
    assert failure is None, str(failure)


class _Err(Exception):
    def __init__(self, msg: str, t: object = None) -> None:
        super().__init__(msg)
        self.t = t


class _D(dict):  # type: ignore[type-arg]
    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)
        self.extra = 1


def test_an_escaping_user_exception_keeps_eager_args_and_cause() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        raise _Err("escape", x * 2.0) from KeyError("why")

    for f in (fn, compile_api.compile(fn, backend="eager")):
        with pytest.raises(_Err) as info:
            f(torch.ones(2))
        assert info.value.args == ("escape",)
        assert isinstance(info.value.__cause__, KeyError)
        assert torch.equal(info.value.t, torch.full((2,), 2.0))


def test_a_dict_subclass_super_init_keeps_its_items() -> None:
    def fn(x: torch.Tensor) -> tuple[dict[str, torch.Tensor], int]:
        d = _D(a=x)
        return d, len(d)

    eager = fn(torch.ones(1))
    got = compile_api.compile(fn, backend="eager")(torch.ones(1))
    assert list(got[0]) == list(eager[0]) == ["a"] and got[1] == eager[1] == 1
    assert torch.equal(got[0]["a"], eager[0]["a"])
