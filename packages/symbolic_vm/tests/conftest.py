"""Shared fixtures; the harness itself lives in vm_harness.py (importable from the tests)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import compile_api

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def _restore_grad_mode() -> Iterator[None]:
    mode = torch.is_grad_enabled()
    yield
    torch.set_grad_enabled(mode)


@pytest.fixture
def errors_raise(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A fresh compile_api whose internal errors raise (``suppress_errors`` off) instead of
    running the frame eagerly: a test then sees the error, not eager's result. Test files take
    it with ``pytestmark = pytest.mark.usefixtures("errors_raise")``."""
    monkeypatch.setattr(compile_api.config, "suppress_errors", False)
    compile_api.reset()
    yield
    compile_api.reset()
