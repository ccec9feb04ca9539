"""Recompile logs, the cache size limit and guard printouts, through compile_api."""

from __future__ import annotations

import io
import logging
import re
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch

import compile_api


def affine(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def flagged(x: torch.Tensor, flag: bool) -> torch.Tensor:
    return x + 1 if flag else x - 1


@pytest.fixture
def recompile_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    compile_api.set_logs(recompiles=True)
    try:
        with caplog.at_level(logging.DEBUG, logger="strata.recompiles"):
            yield caplog
    finally:
        compile_api.set_logs(recompiles=False)


def test_recompile_log_names_the_size_mismatch(
    counter: Any, recompile_log: pytest.LogCaptureFixture
) -> None:
    fn = compile_api.compile(affine, backend=counter, dynamic=False)
    fn(torch.randn(3))
    assert "Recompiling" not in recompile_log.text
    x = torch.randn(4)
    torch.testing.assert_close(fn(x), affine(x))
    assert counter.count == 2
    assert "Recompiling affine" in recompile_log.text
    assert "tensor 'x' size mismatch at index 0: expected 3, actual 4" in recompile_log.text


def test_recompile_log_names_the_constant_that_changed(
    counter: Any, recompile_log: pytest.LogCaptureFixture
) -> None:
    fn = compile_api.compile(flagged, backend=counter)
    x = torch.randn(3)
    fn(x, True)
    torch.testing.assert_close(fn(x, False), flagged(x, False))
    assert "L['flag'] == True expected, got False" in recompile_log.text


def test_recompile_log_names_dtype_and_grad_mode(
    counter: Any, recompile_log: pytest.LogCaptureFixture
) -> None:
    fn = compile_api.compile(affine, backend=counter)
    fn(torch.randn(3))
    fn(torch.randn(3, dtype=torch.float64))
    assert re.search(r"tensor 'x' dtype mismatch.*float32.*float64", recompile_log.text)
    with torch.no_grad():
        fn(torch.randn(3))
    assert "grad" in recompile_log.text.split("Recompiling")[-1]


def test_no_recompile_log_on_a_cache_hit(
    counter: Any, recompile_log: pytest.LogCaptureFixture
) -> None:
    fn = compile_api.compile(affine, backend=counter)
    for _ in range(3):
        fn(torch.randn(3))
    assert counter.count == 1
    assert "Recompiling" not in recompile_log.text


def test_set_logs_recompiles_prints_to_the_current_stderr(
    counter: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    compile_api.set_logs(recompiles=True)
    try:
        err = io.StringIO()
        monkeypatch.setattr(sys, "stderr", err)
        fn = compile_api.compile(affine, backend=counter, dynamic=False)
        fn(torch.randn(3))
        fn(torch.randn(5))
    finally:
        compile_api.set_logs(recompiles=False)
    assert "[strata.recompiles] Recompiling affine" in err.getvalue()
    assert "expected 3, actual 5" in err.getvalue()


def test_cache_size_limit_warns_once_with_reasons_and_runs_eagerly(counter: Any) -> None:
    compile_api.config.cache_size_limit = 3
    fn = compile_api.compile(affine, backend=counter, dynamic=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(2, 10):
            x = torch.randn(n)
            torch.testing.assert_close(fn(x), affine(x))
    limit_warnings = [w for w in caught if "cache_size_limit" in str(w.message)]
    assert counter.count == 3
    assert len(limit_warnings) == 1
    message = str(limit_warnings[0].message)
    assert "affine" in message and "size mismatch" in message
    # The cached entries still run for their own sizes.
    for n in (2, 3, 4):
        torch.testing.assert_close(fn(torch.ones(n)), affine(torch.ones(n)))
    assert counter.count == 3


def test_guard_log_prints_tensor_match_in_its_documented_form(
    caplog: pytest.LogCaptureFixture,
) -> None:
    compile_api.set_logs(guards=True)
    try:
        with caplog.at_level(logging.DEBUG, logger="strata.guards"):
            compile_api.compile(affine, backend="eager", dynamic=False)(torch.randn(10))
    finally:
        compile_api.set_logs(guards=False)
    line = next(ln for ln in caplog.text.splitlines() if "TENSOR_MATCH" in ln)
    assert re.search(
        r"TENSOR_MATCH: L\['x'\] class=torch\.Tensor dtype=torch\.float32 device=cpu "
        r"requires_grad=False size=\[10\] stride=\[1\] dispatch_keys=\[CPU, [A-Za-z, ]+\]",
        line,
    ), line
    assert "GLOBAL_STATE" in caplog.text


def test_guard_log_shows_symbolic_sizes_when_dynamic(caplog: pytest.LogCaptureFixture) -> None:
    compile_api.set_logs(guards=True)
    try:
        with caplog.at_level(logging.DEBUG, logger="strata.guards"):
            compile_api.compile(affine, backend="eager", dynamic=True)(torch.randn(10, 3))
    finally:
        compile_api.set_logs(guards=False)
    line = next(ln for ln in caplog.text.splitlines() if "TENSOR_MATCH" in ln)
    assert "size=[10, 3]" not in line, "a dynamic dim is not printed as a fixed size"
