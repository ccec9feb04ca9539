"""STRATA_COMPILE_DEBUG / TORCH_COMPILE_DEBUG: a folder per compiled frame with what it made."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import compile_api


def _toy(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    x = a / (torch.abs(a) + 1)
    return x * b.sum()


def test_compile_debug_dumps_graph_aot_graphs_code_guards_and_bytecode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATA_COMPILE_DEBUG_DIR", str(tmp_path))
    compile_api.config.compile_debug = True
    a = torch.randn(10, requires_grad=True)
    b = torch.randn(10)
    out = compile_api.compile(_toy, backend="inductor")(a, b)
    torch.testing.assert_close(out, _toy(a, b))
    (run,) = (tmp_path / "strata_compile_debug").iterdir()
    (frame,) = run.iterdir()
    assert frame.name == "0_0__toy"
    files = sorted(p.name for p in frame.iterdir())
    (graph_file,) = frame.glob("fx_graph_readable___compiled_fn_*.py")
    for name in ("aot_forward_graph_0.py", "aot_backward_graph_0.py", "output_code_0.py",
                 "guards.txt", "bytecode.txt"):
        assert name in files, files
    graph = graph_file.read_text()
    assert 'a: "f32[10][1]cpu"' in graph
    assert "in _toy, code: x = a / (torch.abs(a) + 1)" in graph
    assert "TENSOR_MATCH: L['a']" in (frame / "guards.txt").read_text()
    assert "MODIFIED BYTECODE" in (frame / "bytecode.txt").read_text()
    code = (frame / "output_code_0.py").read_text()
    assert "# ---- kernels (C++) ----" in code


def test_torch_compile_debug_variable_is_honoured(tmp_path: Path) -> None:
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(
        """\
        import torch, compile_api
        def f(x):
            return torch.cos(x) + 1
        x = torch.randn(4)
        torch.testing.assert_close(compile_api.compile(f, backend="eager")(x), f(x))
        """
    ))
    env = dict(os.environ, TORCH_COMPILE_DEBUG="1")
    env.pop("STRATA_COMPILE_DEBUG_DIR", None)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    dumps = list((tmp_path / "strata_compile_debug").glob("run_*/0_0_f/fx_graph_readable_*.py"))
    assert len(dumps) == 1
    assert "torch.cos(x)" in dumps[0].read_text()
