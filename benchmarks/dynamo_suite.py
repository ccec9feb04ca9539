"""Run a slice of PyTorch's own Dynamo behaviour tests under torch.compile and under Strata.

The test files are PyTorch's (``test/dynamo/test_*.py``), fetched into a scratch folder outside
this repository (they are never committed here). Each file runs with pytest twice, one file at a
time:

* ``torch``: as written (torch.compile / torch._dynamo.optimize are the reference);
* ``strata``: this module, loaded as a pytest plugin (``-p dynamo_suite``), replaces
  ``torch.compile``, ``torch._dynamo.optimize``, ``optimize_assert`` and ``reset`` (also the copies
  that ``torch._dynamo.testing`` and ``torch._dynamo.test_case`` imported) with compile_api's, so
  the tests' own backends (``CompileCounter``, ``"eager"``, ...) receive Strata's graphs.

The same plugin records each test's outcome (and, for failures, the exception and the test line
that raised it) as JSON lines, with a per-test alarm so one hanging test cannot eat the file.

    python benchmarks/dynamo_suite.py --tests-dir /tmp/dyntests \
        --out /tmp/dyntests/results.json --md docs/dynamo-tests-YYYY-MM-DD.md

Only ``nopython``/``fullgraph``, ``dynamic`` and the backend are forwarded; export is not mapped.
Before each compile the shim copies the torch._dynamo.config fields Strata shares
(``cache_size_limit``, ``automatic_dynamic_shapes``, ``assume_static_by_default``,
``capture_scalar_outputs``, ``capture_dynamic_output_shape_ops``) into compile_api.config,
since the tests patch torch's.
Two more of torch's controls are mapped onto what Strata honours, so that a test cannot pass
under Strata only because Strata never saw the check:

* ``torch._dynamo.config.error_on_recompile`` (tests patch it around a call that must not
  recompile) reads as ``torch.compiler.set_stance("fail_on_recompile")``, which Strata obeys:
  the stance torch's frontend keeps is wrapped so that it says so while the config is on;
* ``torch._dynamo.exc.Unsupported`` becomes the pair (torch's class, Strata's), so
  ``assertRaises(Unsupported)`` and ``except Unsupported`` accept Strata's fullgraph error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

MODE_ENV = "DYNAMO_SUITE_MODE"
RESULTS_ENV = "DYNAMO_SUITE_RESULTS"
TEST_TIMEOUT_ENV = "DYNAMO_SUITE_TEST_TIMEOUT"
SHARED_CONFIG = (
    # torch 2.13's name last: once a test's patch.object of the alias cache_size_limit ends,
    # that name no longer exists on torch's config and only recompile_limit reads the value
    "cache_size_limit",
    "recompile_limit",
    "automatic_dynamic_shapes",
    "assume_static_by_default",
    "capture_scalar_outputs",
    "capture_dynamic_output_shape_ops",
)
COUNT_WORDS = re.compile(
    r"frame_count|op_count|expected_ops|expected_frame_count|graph_count|cnt|len\(\w+\.graphs\)"
)


class TestTimeout(Exception):
    """Raised by the per-test alarm."""


# ----------------------------------------------------------------------------- the shim


def _sync_config() -> None:
    import torch

    import compile_api

    dyn_config: Any = getattr(torch, "_dynamo").config
    for name in SHARED_CONFIG:
        if hasattr(dyn_config, name) and hasattr(compile_api.config, name):
            setattr(compile_api.config, name, getattr(dyn_config, name))


class _StanceWithRecompileCheck:
    """torch's compile stance as Strata reads it, "fail_on_recompile" while the test patches
    ``torch._dynamo.config.error_on_recompile`` on (everything else read from the real one)."""

    def __init__(self, real: Any, dyn_config: Any) -> None:
        self._real = real
        self._dyn_config = dyn_config

    @property
    def stance(self) -> str:
        real = str(self._real.stance)
        if real == "default" and getattr(self._dyn_config, "error_on_recompile", False):
            return "fail_on_recompile"
        return real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def _install_shim() -> None:
    import torch

    import compile_api
    import symbolic_vm

    dynamo: Any = getattr(torch, "_dynamo")
    import torch._dynamo.test_case as test_case  # noqa: F401  (tests import it; patch its copy)
    import torch._dynamo.testing as testing

    real_reset = dynamo.reset

    def strata_compile(model: Any = None, **kwargs: Any) -> Any:
        _sync_config()
        return compile_api.compile(model, **kwargs)

    def strata_optimize(
        backend: Any = "inductor", *, nopython: bool = False, disable: bool = False,
        dynamic: Any = None, **_ignored: Any,
    ) -> Any:
        if disable:
            return lambda fn: fn
        _sync_config()
        return compile_api.optimize(backend, nopython=nopython, dynamic=dynamic)

    def strata_optimize_assert(backend: Any, *, dynamic: Any = None, **_ignored: Any) -> Any:
        # torch's optimize_assert compiles one graph per frame or raises: fullgraph.
        _sync_config()
        return compile_api.optimize(backend, nopython=True, dynamic=dynamic)

    def strata_reset() -> None:
        # torch's reset is all: compile_api follows it (torch_controls.on_torch_reset), also
        # when a test calls it inside compiled code, where a compile_api.reset() of our own
        # would be a call torch's test never made.
        real_reset()

    setattr(torch, "compile", strata_compile)
    for module in (dynamo, dynamo.eval_frame, testing):
        if hasattr(module, "optimize"):
            setattr(module, "optimize", strata_optimize)
        if hasattr(module, "optimize_assert"):
            setattr(module, "optimize_assert", strata_optimize_assert)
    for module in (dynamo, testing, sys.modules["torch._dynamo.test_case"]):
        if hasattr(module, "reset"):
            setattr(module, "reset", strata_reset)
    eval_frame = dynamo.eval_frame
    eval_frame._stance = _StanceWithRecompileCheck(eval_frame._stance, dynamo.config)
    # Set before the test files import it (torch's own modules bound the class long before).
    dynamo.exc.Unsupported = (dynamo.exc.Unsupported, symbolic_vm.Unsupported)


def _alarm(signum: int, frame: Any) -> None:
    raise TestTimeout("test ran past the per-test limit")


def pytest_configure(config: Any) -> None:
    if os.environ.get(MODE_ENV) == "strata":
        _install_shim()


def pytest_runtest_call(item: Any) -> None:
    seconds = int(os.environ.get(TEST_TIMEOUT_ENV, "0") or 0)
    if seconds > 0 and hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(seconds)


def pytest_runtest_teardown(item: Any) -> None:
    if hasattr(signal, "SIGALRM"):
        signal.alarm(0)


def _failing_line(report: Any, tests_dir: str) -> str:
    """The innermost traceback line in the test file or in torch's dynamo testing helpers."""
    entries = getattr(getattr(report.longrepr, "reprtraceback", None), "reprentries", None) or []
    found = ""
    for entry in entries:
        loc: Any = getattr(entry, "reprfileloc", None)
        path = os.path.abspath(str(getattr(loc, "path", "")))
        if not (path.startswith(tests_dir) or path.endswith("_dynamo/testing.py")):
            continue
        lines = list(getattr(entry, "lines", []))
        for i, line in enumerate(lines):
            if line.startswith(">"):
                # A statement over several lines: pytest marks its first line only.
                stmt = [line[1:].strip()]
                for more in lines[i + 1:]:
                    if more.startswith(("E ", ">")) or not more.strip():
                        break
                    stmt.append(more.strip())
                found = f"{os.path.basename(path)}:{getattr(loc, 'lineno', 0)}: {' '.join(stmt)}"
    return found


def pytest_runtest_logreport(report: Any) -> None:
    path = os.environ.get(RESULTS_ENV)
    if not path:
        return
    if report.when != "call" and not (report.failed or report.skipped):
        return
    if report.when == "teardown" and report.skipped:
        return
    outcome = report.outcome
    if hasattr(report, "wasxfail"):
        outcome = "xfailed" if report.skipped else "xpassed"
    crash = getattr(getattr(report.longrepr, "reprcrash", None), "message", "")
    if report.failed and "Unexpected success" in (crash or str(report.longrepr)[-200:]):
        # unittest's expectedFailure marks a known Dynamo bug; a body that now runs to the end
        # did what the test checks (the same as eager), so it counts as passing.
        outcome = "xpassed"
    if report.skipped and not crash and isinstance(report.longrepr, tuple):
        crash = str(report.longrepr[2])
    record = {
        "nodeid": report.nodeid, "when": report.when, "outcome": outcome,
        "crash": crash[:2000] if report.failed else crash[:200],
        "line": _failing_line(report, os.getcwd()) if report.failed else "",
        "text": report.longreprtext[-4000:] if report.failed else "",
    }
    with open(path, "a") as fh:
        fh.write(json.dumps(record) + "\n")


# ----------------------------------------------------------------------------- the driver


def _passed(outcome: str) -> bool:
    return outcome in ("passed", "xfailed", "xpassed")


def _outcome(rec: dict[str, Any]) -> str:
    # records written before the plugin mapped unittest's unexpected successes
    if rec.get("outcome") == "failed" and "Unexpected success" in rec.get("crash", ""):
        return "xpassed"
    return str(rec.get("outcome", "missing"))


def categorize(rec: dict[str, Any]) -> str:
    """A short reason for a failure: count-only, wrong-result, unsupported, timeout, or crash."""
    crash = rec.get("crash", "")
    first = crash.splitlines()[0] if crash else ""
    line = rec.get("line", "")
    if "TestTimeout" in first or "TestTimeout" in rec.get("text", "")[-300:]:
        return "timeout"
    if re.search(r"Unsupported|graph break|fullgraph", first):
        return "unsupported"
    if first.startswith("AssertionError") or first.startswith("assert "):
        if COUNT_WORDS.search(line):
            # Zero graphs where torch made some: the whole frame ran eagerly (results were
            # still checked first where the test checks them).
            if "but got 0." in crash and "frame_count" in line:
                return "count-only (0 graphs: ran eagerly)"
            return "count-only"
        if '" does not match "' in first:
            return "error message differs (right exception type)"
        if re.search(r"assertRaises|assertRaisesRegex|assertExpectedInline|assertIn", line):
            return "behaviour (other assertion)"
        return "wrong-result?"
    exc = first.split(":", 1)[0].strip() or "?"
    return f"crash ({exc})"


def _run_file(tests_dir: Path, name: str, mode: str, out_dir: Path, file_timeout: int,
              test_timeout: int) -> tuple[dict[str, dict[str, Any]], str]:
    results = out_dir / f"{name}.{mode}.jsonl"
    if results.exists():
        results.unlink()
    env = dict(os.environ)
    env[MODE_ENV] = mode
    env[RESULTS_ENV] = str(results)
    env[TEST_TIMEOUT_ENV] = str(test_timeout)
    env["PYTHONPATH"] = os.pathsep.join(
        # _deps: test-only packages torch's test helpers import (expecttest), installed with
        # `pip install --target <tests-dir>/_deps expecttest` so the shared venv stays as it is.
        [str(Path(__file__).resolve().parent), str(tests_dir), str(tests_dir / "_deps"),
         env.get("PYTHONPATH", "")])
    cmd = ["timeout", str(file_timeout), sys.executable, "-m", "pytest", name, "-q",
           "-p", "no:cacheprovider", "-p", "dynamo_suite", "--tb=long", "-rN"]
    started = time.time()
    proc = subprocess.run(cmd, cwd=tests_dir, env=env, capture_output=True, text=True)
    status = f"rc={proc.returncode} {time.time() - started:.0f}s"
    if proc.returncode == 124:
        status += " (file timed out)"
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or [""]
    status += f" | {tail[0][:200]}"
    recs: dict[str, dict[str, Any]] = {}
    if results.exists():
        for raw in results.read_text().splitlines():
            rec = json.loads(raw)
            prev = recs.get(rec["nodeid"])
            # A setup/teardown failure overrides a passing call.
            if prev is None or not prev["outcome"] == "failed":
                recs[rec["nodeid"]] = rec
    return recs, status


def summarize(data: dict[str, Any]) -> str:
    lines = ["| file | tests run | torch passes | Strata passes | both | Strata / torch "
             "| count-only failures | Strata / torch, count-only excused |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    cats: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    tot = Counter[str]()
    for name, per in data["files"].items():
        torch_r, strata_r = per["torch"], per["strata"]
        ids = sorted(set(torch_r) | set(strata_r))
        tp = [i for i in ids if _passed(_outcome(torch_r.get(i, {})))]
        sp = [i for i in ids if _passed(_outcome(strata_r.get(i, {})))]
        both = [i for i in tp if i in sp]
        count_only = 0
        for i in tp:
            if i in sp:
                continue
            rec = strata_r.get(i, {"outcome": "missing", "crash": "not run (file stopped)"})
            cat = categorize(rec) if rec["outcome"] == "failed" else rec["outcome"]
            cats[cat] += 1
            count_only += cat.startswith("count-only")
            first = (rec.get("crash") or "").splitlines()[:1]
            examples.setdefault(cat, []).append(
                f"`{i}`: {first[0][:180] if first else ''}"
                + (f" — at `{rec['line'][:150]}`" if rec.get("line") else ""))
        pct = 100.0 * len(both) / len(tp) if tp else 0.0
        pct2 = 100.0 * (len(both) + count_only) / len(tp) if tp else 0.0
        lines.append(f"| {name} | {len(ids)} | {len(tp)} | {len(sp)} | {len(both)} | "
                     f"{pct:.0f}% | {count_only} | {pct2:.0f}% |")
        tot.update(ids=len(ids), tp=len(tp), sp=len(sp), both=len(both), co=count_only)
    if tot["tp"]:
        lines.append(f"| **all** | {tot['ids']} | {tot['tp']} | {tot['sp']} | {tot['both']} | "
                     f"**{100.0 * tot['both'] / tot['tp']:.0f}%** | {tot['co']} | "
                     f"{100.0 * (tot['both'] + tot['co']) / tot['tp']:.0f}% |")
    lines += ["", "Failure categories (tests torch passes and Strata fails):", ""]
    lines += [f"- {cat}: {n}" for cat, n in cats.most_common()]
    lines += ["", "Examples:", ""]
    for cat, _ in cats.most_common():
        for ex in examples[cat][:6]:
            lines.append(f"- [{cat}] {ex}")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tests-dir", type=Path, required=True)
    ap.add_argument("--files", nargs="*", default=None, help="default: every test_*.py there")
    ap.add_argument("--out", type=Path, required=True, help="JSON with every record")
    ap.add_argument("--md", type=Path, default=None, help="write the summary table here too")
    ap.add_argument("--file-timeout", type=int, default=900)
    ap.add_argument("--test-timeout", type=int, default=60)
    ap.add_argument("--modes", nargs="*", default=["torch", "strata"],
                    help="none: only summarize the existing --out file")
    ap.add_argument("--stop-at", default=None, help="UTC HH:MM; start no new run after it")
    args = ap.parse_args()
    tests_dir = args.tests_dir.resolve()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    files = args.files or sorted(p.name for p in tests_dir.glob("test_*.py"))
    data: dict[str, Any] = {"files": {}}
    if args.out.exists():
        data = json.loads(args.out.read_text())
    for name in files:
        for mode in args.modes:
            if args.stop_at and time.strftime("%H:%M", time.gmtime()) >= args.stop_at:
                print(f"stop time reached; skipping {name} [{mode}]", flush=True)
                continue
            recs, status = _run_file(tests_dir, name, mode, args.out.parent,
                                     args.file_timeout, args.test_timeout)
            per = data["files"].setdefault(name, {"torch": {}, "strata": {}})
            per[mode] = recs
            per.setdefault("status", {})[mode] = status
            print(f"{name} [{mode}]: {len(recs)} results, {status}", flush=True)
            args.out.write_text(json.dumps(data, indent=1))
    table = summarize(data)
    print(table)
    if args.md:
        args.md.write_text(table)


if __name__ == "__main__":
    main()
