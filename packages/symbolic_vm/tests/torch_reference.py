"""torch.compile as the tests' reference, from torch 2.13 on.

The graph counts and results the tests compare with torch.compile are torch 2.13's: CI's torch,
and the release the issues' "as torch.compile" promises name. Older releases capture less (torch
2.11 runs whole frames eagerly, 0 graphs, that 2.13 captures in one) and some give wrong results
(torch 2.11 keeps a stale class attribute after ``Cls.x`` changes). On such a torch a test keeps
every comparison of ours with eager; only the comparisons with torch.compile, written inside
``with torch_reference():``, stop failing the test: a difference there becomes a
``TorchReferenceWarning`` that names this torch and the difference (pytest's warnings summary
lists it under the test). On torch 2.13 and later the block is a plain block: it fails as before.

    runs = run_three_ways(fn, make_args)
    same(runs.ours, runs.eager)
    assert runs.our_graphs == 1
    with torch_reference():
        same(runs.theirs, runs.eager)
        assert runs.our_graphs <= runs.their_graphs
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import torch

REFERENCE_TORCH = (2, 13)
TORCH_VERSION = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
IS_REFERENCE = TORCH_VERSION >= REFERENCE_TORCH


# A builtin class, not one of this module's: pytest-xdist's controller re-imports a worker's
# warning class by its module name, and this module is on the workers' path only (a class
# defined here crashed the whole -n run with ModuleNotFoundError). The message names it.
TorchReferenceWarning = UserWarning


@contextlib.contextmanager
def torch_reference() -> Iterator[None]:
    """Comparisons with torch.compile (its results, its graph and break counts): enforced from
    torch 2.13; on an older torch a failed one is reported as a warning instead."""
    if IS_REFERENCE:
        yield
        return
    try:
        yield
    except AssertionError as difference:
        first = str(difference).strip().splitlines()[:1] or ["assertion failed"]
        reference = ".".join(map(str, REFERENCE_TORCH))
        warnings.warn(
            f"TorchReferenceWarning: torch.compile of torch {torch.__version__} differs and is "
            f"not compared: it is this suite's reference only from torch {reference} "
            f"({first[0]})",
            TorchReferenceWarning,
            stacklevel=3,
        )
