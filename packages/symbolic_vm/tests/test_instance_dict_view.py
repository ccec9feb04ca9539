"""``obj.__dict__`` of an object from the frame and its attributes are one store: an attribute
stored in the trace shows in the dict read before or after it, and a write to the dict after
the store does not undo it (each compared with eager: the result and the object's dict)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import compile_api


class Obj:
    def __init__(self) -> None:
        self.hits = 0


def store_then_read_dict(x: torch.Tensor, o: Any) -> torch.Tensor:
    o.hits = 5
    d = o.__dict__
    return x * d["hits"]


def read_dict_then_store(x: torch.Tensor, o: Any) -> torch.Tensor:
    d = o.__dict__
    o.hits = 5
    return x * d["hits"]


def store_then_write_dict(x: torch.Tensor, o: Any) -> torch.Tensor:
    o.hits += 1
    o.__dict__["other"] = x.sum()
    return x * o.hits


def write_dict_then_read(x: torch.Tensor, o: Any) -> torch.Tensor:
    o.__dict__["hits"] = 7
    return x * o.hits


@pytest.mark.parametrize(
    "fn",
    [store_then_read_dict, read_dict_then_store, store_then_write_dict, write_dict_then_read],
)
def test_attributes_and_the_instance_dict_stay_one_store(
    fn: Callable[[torch.Tensor, Any], torch.Tensor],
) -> None:
    compile_api.reset()
    compiled = compile_api.compile(fn, backend="eager")
    for _ in range(2):
        ours, theirs = Obj(), Obj()
        x = torch.arange(3.0)
        torch.testing.assert_close(compiled(x, ours), fn(x, theirs))
        assert ours.__dict__.keys() == theirs.__dict__.keys()
        for key, value in theirs.__dict__.items():
            torch.testing.assert_close(ours.__dict__[key], value)
