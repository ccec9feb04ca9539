"""The record every workload is described by, and helpers for deterministic inputs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

# One seed for every workload: the eager and compiled instances of a workload are built from it, so
# they start from identical parameters and inputs.
SEED = 20261121

INFERENCE = "inference"
TRAINING = "training"
OVERHEAD = "overhead"


@dataclass(frozen=True)
class Tolerance:
    """How close a result must be to eager's: ``torch.allclose(actual, expected, rtol, atol)``."""

    rtol: float
    atol: float

    def __str__(self) -> str:
        return f"rtol={self.rtol:g}, atol={self.atol:g}"


@dataclass
class Instance:
    """One freshly built copy of a workload: the function to run, its arguments, and its state.

    ``state`` returns the tensors, besides the function's output, that must match eager after the
    first call (for a training step: the gradients and the updated parameters).
    """

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    state: Callable[[], list[torch.Tensor]] = field(default=lambda: [])


@dataclass(frozen=True)
class Workload:
    """A named benchmark: ``build(device, quick)`` makes a fresh, deterministic instance of it.

    ``calls_per_sample`` fixes how many calls make one timed sample (the overhead probes: 20k
    calls); when None the harness picks enough calls for a sample to last ``--min-sample-ms``.
    """

    name: str
    kind: str
    description: str
    build: Callable[[torch.device, bool], Instance]
    tolerance: Tolerance
    calls_per_sample: int | None = None
    quick_calls_per_sample: int | None = None


def generator(offset: int = 0) -> torch.Generator:
    """A CPU generator seeded from SEED (+offset).

    Inputs are drawn on CPU, then moved to the device, so a workload's values match on every device.
    """
    return torch.Generator().manual_seed(SEED + offset)


def randn(shape: tuple[int, ...], device: torch.device, offset: int = 0) -> torch.Tensor:
    """Seeded standard-normal float32 tensor on ``device``."""
    return torch.randn(shape, generator=generator(offset)).to(device)


@contextmanager
def seeded_init(offset: int = 0) -> Iterator[None]:
    """Seed torch's global RNG while modules are built, without disturbing it for anyone else."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED + offset)
        yield
