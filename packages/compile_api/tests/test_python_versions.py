"""compile() on a CPython that the frame hook or the VM does not run on: one clear error."""

from __future__ import annotations

import pytest
import torch

import compile_api
import evalframe
import symbolic_vm.versions


def _double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def test_compile_on_an_unported_python_names_what_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As on 3.14: the C hook is off and the VM has no table for the version.
    monkeypatch.setattr(evalframe, "HOOK_AVAILABLE", False)
    monkeypatch.setattr(evalframe, "UNAVAILABLE_REASON", evalframe._unavailable_reason((3, 14)))
    monkeypatch.setattr(symbolic_vm.versions, "RUNNING", (3, 14))
    with pytest.raises(RuntimeError) as info:
        compile_api.compile(_double, backend="eager")
    text = str(info.value)
    assert "Strata cannot compile on Python" in text
    assert "frames.c needs porting to 3.14" in text  # the hook's part
    assert "symbolic_vm interprets CPython 3.11 to 3.13 bytecode, not 3.14" in text  # the VM's
    with pytest.raises(RuntimeError, match="not 3.14"):
        compile_api.compile(fullgraph=True)(_double)  # the decorator form too


def test_compile_on_a_supported_python_is_not_refused() -> None:
    assert evalframe.UNAVAILABLE_REASON is None
    fn = compile_api.compile(_double, backend="eager")
    x = torch.randn(3)
    torch.testing.assert_close(fn(x), _double(x))
