"""TORCH_TRACE / STRATA_TRACE: the structured log tlparse reads, checked with tlparse itself."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent(
    """\
    import torch, compile_api

    def step(x, n):
        y = torch.sin(x) * n
        print("break")
        return (y + 1).sum()

    f = compile_api.compile(step, backend="inductor")
    for n in (2, 3):
        x = torch.randn(8, requires_grad=True)
        out = f(x, n)
        torch.testing.assert_close(out, step(x, n))
        out.backward()
    print("DONE")
    """
)


def _run(tmp_path: Path, var: str) -> Path:
    trace_dir = tmp_path / "trace"
    (tmp_path / "step.py").write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in {"TORCH_TRACE", "STRATA_TRACE"}}
    env[var] = str(trace_dir)
    done = subprocess.run(
        [sys.executable, str(tmp_path / "step.py")],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "DONE" in done.stdout
    return trace_dir


def _records(log: Path) -> list[dict[str, object]]:
    out = []
    for line in log.read_text().splitlines():
        if line.startswith("\t"):
            continue
        assert re.match(r"^V\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ \S+:\d+\] \{", line), line
        out.append(json.loads(line.split("] ", 1)[1]))
    return out


def test_strata_trace_writes_frames_graphs_code_guards_and_recompiles(tmp_path: Path) -> None:
    trace_dir = _run(tmp_path, "STRATA_TRACE")
    (log,) = trace_dir.glob("dedicated_log_strata_trace_*.log")
    kinds = [next(iter(r)) for r in _records(log)]
    for kind in (
        "dynamo_start", "dynamo_output_graph", "aot_forward_graph", "aot_backward_graph",
        "inductor_output_code", "dynamo_cpp_guards_str", "compilation_metrics",
    ):
        assert kind in kinds, (kind, sorted(set(kinds)))
    names = [r["artifact"]["name"] for r in _records(log) if "artifact" in r]  # type: ignore[index]
    assert "recompile_reasons" in names and "dynamo_graph_break_reason" in names


@pytest.mark.skipif(shutil.which("tlparse") is None, reason="tlparse is not installed")
def test_tlparse_renders_a_strata_trace(tmp_path: Path) -> None:
    trace_dir = _run(tmp_path, "TORCH_TRACE")
    (log,) = trace_dir.glob("dedicated_log_strata_trace_*.log")
    out = tmp_path / "tl_out"
    done = subprocess.run(
        ["tlparse", str(log), "-o", str(out), "--no-browser", "--strict"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    index = (out / "index.html").read_text()
    # Every compile is listed in the stack trie, from the user's script.
    for cid in ("[0/0]", "[0/1]", "[1/0]"):
        assert cid in index, cid
    assert "step.py" in index
    directory = json.loads((out / "compile_directory.json").read_text())
    files = {a["name"] for entry in directory.values() for a in entry["artifacts"]}
    joined = " ".join(sorted(files))
    for stem in (
        "dynamo_output_graph", "aot_forward_graph", "aot_backward_graph",
        "inductor_output_code", "dynamo_cpp_guards_str", "compilation_metrics",
        "recompile_reasons",
    ):
        assert stem in joined, (stem, joined)
    graph = next(p for p in out.rglob("dynamo_output_graph*.txt"))
    assert "f32[8][1]cpu" in graph.read_text()
