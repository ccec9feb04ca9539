"""A fuzzing campaign: many programs, each on several backends; failures shrunk and saved."""

from __future__ import annotations

import pprint
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .generator import generate_inputs, generate_program
from .runner import Failure, Stats, _call, check_source, load_module
from .shrinker import shrink

__all__ = ["program_seed", "run_campaign", "save_regression"]


def program_seed(seed: int, index: int) -> int:
    """The seed of program ``index`` in the run of ``seed``."""
    return seed * 1_000_000 + index


def backends_for(index: int, backends: list[str], inductor_every: int) -> list[str]:
    """The backends program ``index`` runs on (inductor only on every n-th program)."""
    return [
        b
        for b in backends
        if b != "inductor" or (inductor_every > 0 and index % inductor_every == 0)
    ]


def _eager_misses_a_name(text: str, inputs: list[dict[str, Any]]) -> bool:
    """Whether ``fn`` of ``text`` raises NameError/UnboundLocalError eagerly on some input (a
    deletion left a name undefined: both runs then raise, and a difference found after that
    would not be the program's)."""
    module, _ = load_module(text, "shrink_eager")
    return any(
        isinstance(_call(module.fn, module, spec, i).exc, NameError)  # UnboundLocalError too
        for i, spec in enumerate(inputs)
    )


def _shrink(source: str, backend: str, inputs: list[dict[str, Any]], failure: Failure) -> str:
    def still_fails(text: str) -> bool:
        try:
            got = check_source(text, backend, inputs, tag="shrink")
            if got is None or got.signature != failure.signature:
                return False
            if "NameError" in got.detail or "UnboundLocalError" in got.detail:
                return False
            return not _eager_misses_a_name(text, inputs)
        except Exception:  # the candidate broke the module itself (a deleted import)
            return False

    return shrink(source, still_fails)


def save_regression(
    directory: Path,
    pseed: int,
    backend: str,
    source: str,
    inputs: list[dict[str, Any]],
    failure: Failure,
    xfail_reason: str = "",
    name: str = "",
) -> Path:
    """Write a plain pytest file that reruns the (shrunk) program on its inputs.

    With ``xfail_reason`` the test is a strict xfail: it turns red once the bug is fixed.
    ``name`` names the file and test (``test_<name>``) instead of the seed and backend.
    """
    directory.mkdir(parents=True, exist_ok=True)
    name = name or f"fuzz_{pseed}_{backend}"
    path = directory / f"test_{name}.py"
    assert '"""' not in source and "\\" not in source
    marker = (
        f"@pytest.mark.xfail(\n    strict=True,\n    reason={xfail_reason!r},\n)\n"
        if xfail_reason
        else ""
    )
    path.write_text(
        f'"""Fuzz reproducer: program seed {pseed}, backend {backend} (shrunk).\n\n'
        f"Found as: {str(failure)[:300]!s}\n"
        '"""\n\n'
        "# ruff: noqa: E501\n"
        "from __future__ import annotations\n\n"
        + ("import pytest\n\n" if xfail_reason else "")
        + "from tests.fuzz.runner import check_source\n\n"
        f'SOURCE = """\\\n{source}"""\n\n'
        f"INPUTS = {pprint.pformat(inputs, width=96, compact=True)}\n\n\n"
        f"{marker}"
        f"def test_{name}_compiled_matches_eager() -> None:\n"
        f"    failure = check_source(SOURCE, {backend!r}, INPUTS)\n"
        "    assert failure is None, str(failure)\n"
    )
    return path


def run_campaign(
    seed: int,
    programs: int,
    backends: list[str],
    first: int = 0,
    inductor_every: int = 25,
    shrink_failures: bool = True,
    save_dir: Path | None = None,
    max_seconds: float | None = None,
    log: Callable[[str], None] = lambda line: None,
    avoid: frozenset[str] = frozenset(),
    families: list[str] | None = None,
    shard: tuple[int, int] = (0, 1),
) -> dict[str, Any]:
    """Run ``programs`` programs; a summary with every mismatch found.

    ``shard=(k, n)`` runs only the programs ``first + j`` with ``j % n == k``: n processes
    given the same seed and program range split it between them, and each program keeps the
    index (and seed) it has in the whole run.
    """
    k, n = shard
    if not 0 <= k < n:
        raise ValueError(f"shard {k}/{n}: need 0 <= k < n")
    stats = Stats()
    mismatches: list[dict[str, Any]] = []
    runs: Counter[str] = Counter()
    start = time.monotonic()
    done = 0
    for index in range(first + k, first + programs, n):
        if max_seconds is not None and time.monotonic() - start > max_seconds:
            break
        pseed = program_seed(seed, index)
        program = generate_program(pseed, avoid, families)
        inputs = generate_inputs(pseed)
        for backend in backends_for(index, backends, inductor_every):
            runs[backend] += 1
            failure = check_source(program.source, backend, inputs, stats)
            if failure is None:
                continue
            record: dict[str, Any] = {
                "index": index,
                "program_seed": pseed,
                "backend": backend,
                "failure": str(failure)[:500],
            }
            log(f"MISMATCH program {index} (seed {pseed}) on {backend}: {str(failure)[:300]}")
            source = program.source
            record["signature"] = "/".join(failure.signature)
            seen = sum(m["signature"] == record["signature"] for m in mismatches)
            if shrink_failures and seen == 0:  # shrink the first of each kind only
                source = _shrink(source, backend, inputs, failure)
                record["shrunk_lines"] = source.count("\n")
            if seen == 0:
                record["source"] = source
            if save_dir is not None and seen == 0:
                record["saved"] = str(
                    save_regression(save_dir, pseed, backend, source, inputs, failure)
                )
            mismatches.append(record)
        done += 1
        if done % 50 == 0:
            log(f"{done} programs, {len(mismatches)} mismatches, {time.monotonic() - start:.0f}s")
    return {
        "seed": seed,
        "first": first,
        "avoided": sorted(avoid),
        "families": families,
        "shard": f"{k}/{n}",
        "programs": done,
        "runs": dict(runs),
        "graphs_compiled": stats.graphs,
        "runs_with_graphs": stats.programs_with_graphs,
        "strata_warnings": dict(Counter(stats.warnings).most_common(20)),
        "mismatch_kinds": dict(Counter(m["signature"] for m in mismatches)),
        "mismatches": mismatches,
    }
