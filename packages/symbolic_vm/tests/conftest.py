"""Shared fixtures; the harness itself lives in vm_harness.py (importable from the tests)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def _restore_grad_mode() -> Iterator[None]:
    mode = torch.is_grad_enabled()
    yield
    torch.set_grad_enabled(mode)
