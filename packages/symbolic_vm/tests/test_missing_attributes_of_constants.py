"""A missing attribute of a constant argument (None, an int, a string) raises AttributeError as
in eager, so ``getattr(obj, name, default)`` and ``try/except AttributeError`` trace: the
pattern of transformers' masking utilities, ``getattr(cache, "is_compileable", False)`` with
``cache=None``, which made GPT-2 with ``use_cache=False`` run eagerly on every call."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from counting_backend import Counting

import compile_api


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compile_api.config, "suppress_errors", False)
    compile_api.reset()


def with_default(x: torch.Tensor, c: Any) -> torch.Tensor:
    return x + (1 if getattr(c, "is_compileable", False) else 2)


def with_except(x: torch.Tensor, c: Any) -> torch.Tensor:
    try:
        n = c.missing_attribute
    except AttributeError:
        n = 5
    return x * n


@pytest.mark.parametrize("fn", [with_default, with_except])
@pytest.mark.parametrize("constant", [None, 3, "text"])
def test_a_missing_attribute_of_a_constant_argument_traces_as_eager_raises_it(
    fn: Any, constant: object
) -> None:
    counting = Counting()
    compiled = compile_api.compile(fn, backend=counting, fullgraph=True)
    x = torch.arange(3.0)
    torch.testing.assert_close(compiled(x, constant), fn(x, constant))
    assert counting.count == 1


def test_an_attribute_that_exists_is_still_read() -> None:
    class Cache:
        is_compileable = True

    compiled = compile_api.compile(with_default, backend="eager", fullgraph=True)
    x = torch.arange(3.0)
    torch.testing.assert_close(compiled(x, None), with_default(x, None))
    torch.testing.assert_close(compiled(x, Cache()), with_default(x, Cache()))
