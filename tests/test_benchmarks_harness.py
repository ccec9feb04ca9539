"""The benchmark harness reports failures instead of raising, and writes a well-formed table/JSON.

Fast by design: --quick sizes, one or two tiny workloads, eager plus fake implementations.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

from harness import (  # noqa: E402
    FAILED,
    OK,
    Eager,
    GraphCounts,
    Settings,
    compare,
    markdown_table,
    results_json,
    run_in_process,
)
from workloads import BY_NAME  # noqa: E402

QUICK = Settings(repeats=2, warmup=1, min_sample_s=1e-4, quick=True)


class RaisesAtCompile:
    name = "raises_at_compile"

    def compile(self, fn):
        raise RuntimeError("backend exploded\nsecond line that must not reach the table")

    def graph_counts(self, fresh):
        return GraphCounts(None, None, "fake")


class RaisesOnSecondCall:
    name = "raises_on_second_call"

    def compile(self, fn):
        calls = []

        def wrapped(*args):
            calls.append(1)
            if len(calls) > 1:
                raise ValueError("guard failure on call 2")
            return fn(*args)

        return wrapped

    def graph_counts(self, fresh):
        return GraphCounts(1, 0, "fake")


class WrongResult:
    name = "wrong_result"

    def compile(self, fn):
        def wrapped(*args):
            return fn(*args) + 1.0

        return wrapped

    def graph_counts(self, fresh):
        return GraphCounts(3, 2, "fake")


def _run(workload_name, *impls):
    factories = [("eager", Eager)] + [(impl.name, impl) for impl in impls]
    return {r.impl: r for r in run_in_process(BY_NAME[workload_name], factories, QUICK)}


def test_failing_implementations_are_reported_with_their_stage_and_first_line():
    results = _run("overhead_add_one", RaisesAtCompile, RaisesOnSecondCall, WrongResult)

    eager = results["eager"]
    assert eager.status == OK and eager.median_s is not None and eager.median_s > 0
    assert eager.speedup == pytest.approx(1.0)
    assert len(eager.samples_s) == QUICK.repeats

    broken = results["raises_at_compile"]
    assert broken.status == FAILED and broken.stage == "setup"
    assert broken.error == "RuntimeError: backend exploded"
    assert broken.median_s is None and broken.speedup is None

    late = results["raises_on_second_call"]
    assert late.status == FAILED and late.stage == "warmup"
    assert late.error == "ValueError: guard failure on call 2"
    # Its first call ran and matched eager before it failed.
    assert late.correct is True and late.compile_s is not None

    wrong = results["wrong_result"]
    assert wrong.status == OK and wrong.correct is False
    assert wrong.max_abs_diff == pytest.approx(1.0)
    assert (wrong.graphs, wrong.graph_breaks) == (3, 2)


def test_training_step_correctness_checks_grads_and_updated_parameters():
    class CorruptsOneGrad:
        name = "corrupts_one_grad"

        def compile(self, fn):
            params = [c.cell_contents for c in fn.__closure__ if isinstance(c.cell_contents, list)]

            def wrapped(*args):
                loss = fn(*args)
                params[0][0].grad.mul_(1.01)  # loss right, one gradient off by 1%
                return loss

            return wrapped

        def graph_counts(self, fresh):
            return GraphCounts(None, None, "fake")

    results = _run("mlp_train", CorruptsOneGrad)
    assert results["eager"].correct is True
    assert results["corrupts_one_grad"].status == OK
    assert results["corrupts_one_grad"].correct is False


def test_compare_accepts_matching_nans_and_rejects_shape_or_value_differences():
    a = torch.tensor([1.0, float("nan"), 3.0])
    assert compare([a], [a.clone()], 1e-6, 1e-6)[0]
    ok, worst, _ = compare([a], [torch.tensor([1.0, 2.0, 3.0])], 1e-6, 1e-6)
    assert not ok and math.isnan(worst)
    assert not compare([a], [a[:2]], 1e-6, 1e-6)[0]
    assert not compare([a], [a, a], 1e-6, 1e-6)[0]
    ok, worst, _ = compare([torch.ones(2)], [torch.ones(2) + 1e-3], 0.0, 1e-2)
    assert ok and worst == pytest.approx(1e-3, rel=1e-3)


def test_table_and_json_are_well_formed_with_failed_rows():
    results = list(_run("overhead_add_one", RaisesAtCompile, WrongResult).values())
    table = markdown_table(results).splitlines()
    header_cells = table[0].count("|")
    assert len(table) == 2 + len(results)
    assert all(line.count("|") - line.count("\\|") == header_cells for line in table)
    failed_row = next(line for line in table if "raises_at_compile" in line)
    assert "FAILED (setup): RuntimeError: backend exploded" in failed_row
    assert "second line" not in failed_row
    assert "**NO**" in next(line for line in table if "wrong_result" in line)

    payload = json.loads(results_json(results, {"command": "test"}))
    rows = {r["impl"]: r for r in payload["results"]}
    assert rows["raises_at_compile"]["status"] == FAILED
    assert rows["eager"]["median_s"] > 0
    assert payload["meta"] == {"command": "test"}


PLUGIN = textwrap.dedent(
    """
    import os


    class Raising:
        name = "raising"

        def compile(self, fn):
            raise NotImplementedError("no backend here")

        def graph_counts(self, fresh):
            return None


    class Crashing:
        name = "crashing"

        def compile(self, fn):
            def wrapped(*args):
                os.abort()
            return wrapped

        def graph_counts(self, fresh):
            return None


    raising = Raising()
    crashing = Crashing()
    """
)


def test_cli_quick_run_writes_outputs_and_survives_a_crashing_implementation(tmp_path):
    (tmp_path / "fake_impls.py").write_text(PLUGIN)
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path)
    out_dir = tmp_path / "results"
    json_path = tmp_path / "out.json"

    def run(impls, only, *extra):
        return subprocess.run(
            [sys.executable, str(BENCH / "run.py"), "--quick", "--only", only, "--impl", impls,
             "--repeats", "2", "--out-dir", str(out_dir), "--json", str(json_path), "--no-plot",
             *extra],
            capture_output=True, text=True, env=env, timeout=300,
        )

    proc = run("eager,fake_impls:raising", "overhead_add_one,pointwise", "--in-process")
    assert proc.returncode == 0, proc.stderr
    assert "[1/2] pointwise:" in proc.stderr and "[2/2] overhead_add_one:" in proc.stderr
    failed_row = "| pointwise | raising | FAILED (setup): NotImplementedError: no backend here |"
    assert failed_row in proc.stdout
    payload = json.loads(json_path.read_text())
    assert [(r["workload"], r["impl"], r["status"]) for r in payload["results"]] == [
        ("pointwise", "eager", OK), ("pointwise", "raising", FAILED),
        ("overhead_add_one", "eager", OK), ("overhead_add_one", "raising", FAILED),
    ]
    assert payload["meta"]["machine"]["torch"] == torch.__version__
    page = (out_dir / "cpu-quick.md").read_text()
    assert "- command: `" in page and "--only overhead_add_one,pointwise" in page

    proc = run("eager,fake_impls:crashing", "overhead_add_one")
    assert proc.returncode == 0, proc.stderr
    rows = {r["impl"]: r for r in json.loads(json_path.read_text())["results"]}
    assert list(rows) == ["eager", "crashing"]
    # The crash takes down the shared child; eager is then measured apart and keeps its row.
    assert rows["crashing"]["status"] == FAILED and rows["crashing"]["stage"] == "process"
    assert "signal 6" in rows["crashing"]["error"]
    assert rows["eager"]["status"] == OK and rows["eager"]["median_s"] > 0
    assert "run apart" in rows["eager"]["note"]


def test_process_clock_reports_cpu_time_and_keeps_wall_time_alongside():
    settings = Settings(repeats=2, warmup=0, min_sample_s=1e-4, quick=True, clock="process")
    [eager] = run_in_process(BY_NAME["overhead_add_one"], [("eager", Eager)], settings)
    assert eager.clock == "process"
    assert eager.samples_s == eager.cpu_samples_s
    assert len(eager.wall_samples_s) == len(eager.cpu_samples_s) == 2
    assert all(t > 0 for t in eager.wall_samples_s)


def test_a_compile_that_changes_the_thread_count_is_undone_and_named():
    class ChangesThreads:
        name = "changes_threads"

        def compile(self, fn):
            def wrapped(*args):
                torch.set_num_threads(torch.get_num_threads() + 1)
                return fn(*args)

            return wrapped

        def graph_counts(self, fresh):
            return GraphCounts(None, None, "fake")

    threads = torch.get_num_threads()
    try:
        results = _run("overhead_add_one", ChangesThreads)
        # Restored after the first call; later calls change it again, which is theirs to report.
        assert "thread count" in results["changes_threads"].note
        assert results["eager"].note == ""
    finally:
        torch.set_num_threads(threads)


def test_warnings_logged_while_compiling_are_counted_and_shown():
    import logging
    import warnings

    class FallsBackLoudly:
        name = "falls_back_loudly"

        def compile(self, fn):
            def wrapped(*args):
                logging.getLogger("strata.fake").warning("compile failure, running eagerly\ndetail")
                warnings.warn("something odd", RuntimeWarning)
                return fn(*args)

            return wrapped

        def graph_counts(self, fresh):
            return GraphCounts(None, None, "fake")

    results = _run("overhead_add_one", FallsBackLoudly)
    loud = results["falls_back_loudly"]
    assert loud.status == OK
    # Only the first call is watched; the timed calls warn too but are not counted.
    assert loud.warning_count == 2
    assert loud.warnings[0] == "strata.fake: compile failure, running eagerly"
    assert loud.warnings[1].startswith("RuntimeWarning: something odd")
    assert results["eager"].warning_count == 0
    row = next(line for line in markdown_table(list(results.values())).splitlines()
               if "falls_back_loudly" in line)
    assert "2 warnings at compile: strata.fake: compile failure, running eagerly" in row
