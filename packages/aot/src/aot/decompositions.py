"""Decomposition tables handed to make_fx when tracing to aten."""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch._decomp import core_aten_decompositions

__all__ = ["DecompositionTable", "core_decompositions"]

# Keys are aten OpOverloads (or packets); values are the Python decompositions.
DecompositionTable = dict[Any, Any]


def _is_random(op: Any) -> bool:
    tags = getattr(op, "tags", ())
    return torch.Tag.nondeterministic_seeded in tags


def core_decompositions() -> DecompositionTable:
    """Return the table that lowers composite aten ops to the core aten op set.

    It is PyTorch's core-aten decomposition table minus every random op: decomposing dropout or
    bernoulli would draw random numbers differently from eager, and compiled training must give the
    same masks as eager for the same seed.
    """
    return dict(_core_table())  # a copy: callers add and remove entries


@functools.cache
def _core_table() -> DecompositionTable:
    # torch materialises its table on each call (0.11 s, paid once per compiled graph before)
    table: DecompositionTable = dict(core_aten_decompositions())  # type: ignore[no-untyped-call]
    return {op: fn for op, fn in table.items() if not _is_random(op)}
