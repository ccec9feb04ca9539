"""Settings every test file needs before any of them is imported.

Triton binds its language functions (tl.sum, tl.max, ...) to interpreted or compiled form when
it is first imported, and torch's own frontend imports triton (a test module that imports
``torch._dynamo`` at collection does): so the Triton interpreter that runs the Triton tests on a
machine without a GPU is chosen here, before collection, not in those test files.
"""

from __future__ import annotations

import os
import random
import zlib

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def _seed_per_test(request: pytest.FixtureRequest) -> None:
    """Each test draws its random inputs from a seed of its own: a run does not depend on which
    worker ran which files before (CI's outcome is repeatable), and a failure reproduces with
    ``pytest <its id>``. STRATA_TEST_SEED=N draws other inputs: a tolerance that holds only for
    the default draw shows up as a failure under a few values of N (README.md, "The two
    commands")."""
    seed = zlib.crc32(request.node.nodeid.encode()) ^ int(os.environ.get("STRATA_TEST_SEED", "0"))
    torch.manual_seed(seed)
    random.seed(seed)
