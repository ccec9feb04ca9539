"""``python -m tests.fuzz.op_campaign --programs N --seed S``: the op family's campaign.

Program ``i`` of a run has seed ``S * 1_000_000 + i`` (rerun one alone with ``--first i
--programs 1``). Each runs on inductor_lite (C++, or Triton under ``TRITON_INTERPRET=1`` for the
programs whose ``CODEGEN`` says so) against eager (``op_runner``). The first failure of each
kind is shrunk and saved under ``--save-dir`` as a plain pytest file.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .campaign import program_seed
from .op_families import OP_KINDS, generate_op_program
from .op_runner import OpFailure, check_op_source
from .shrinker import shrink

TORCH_VERSION = tuple(int(p) for p in torch.__version__.split(".")[:2])
# Programs whose traced result differs from eager's in an older torch we support, from a bug
# of that torch's own meta functions that both compilers inherit: program seed -> (the torch
# release it is right in, what it is). Seen on the GPU machine's torch 2.11 (2.12 not checked).
OLDER_TORCH_BUGS: dict[int, tuple[tuple[int, int], str]] = {
    2027000017: (
        (2, 13),
        "linalg_vector_norm over a dim of one element: torch 2.11's meta keeps the dim "
        "(f32[1]) where eager returns a 0-dim tensor, so a pointwise op lowered after it "
        "takes the meta's shape",
    ),
}

__all__ = ["run_op_campaign", "save_op_regression"]


def _shrink(source: str, failure: OpFailure) -> str:
    def still_fails(text: str) -> bool:
        try:
            got = check_op_source(text)
        except Exception:
            return False
        return got is not None and got.signature == failure.signature

    return shrink(source, still_fails)


def save_op_regression(
    directory: Path, name: str, source: str, failure: OpFailure, note: str = ""
) -> Path:
    """A pytest file that reruns ``source`` (its inputs are in its ``INPUTS``) against eager."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"test_{name}.py"
    assert '"""' not in source and "\\" not in source
    path.write_text(
        f'"""Op fuzz reproducer (shrunk). {note}\n\nFound as: {str(failure)[:300]}\n"""\n\n'
        "# ruff: noqa: E501\n"
        "from __future__ import annotations\n\n"
        "from tests.fuzz.op_runner import check_op_source\n\n"
        f'SOURCE = """\\\n{source}"""\n\n\n'
        f"def test_{name}_compiled_matches_eager() -> None:\n"
        "    failure = check_op_source(SOURCE)\n"
        "    assert failure is None, str(failure)\n"
    )
    return path


def run_op_campaign(
    seed: int,
    programs: int,
    first: int = 0,
    shrink_failures: bool = True,
    save_dir: Path | None = None,
    max_seconds: float | None = None,
    kinds: list[str] | None = None,
    log: Callable[[str], None] = lambda line: None,
    shard: tuple[int, int] = (0, 1),
) -> dict[str, Any]:
    """Run ``programs`` op programs on inductor_lite; a summary with every failure."""
    k, n = shard
    stats: dict[str, int] = {}
    failures: list[dict[str, Any]] = []
    codegens: Counter[str] = Counter()
    kind_counts: Counter[str] = Counter()
    start = time.monotonic()
    done = 0
    for index in range(first + k, first + programs, n):
        if max_seconds is not None and time.monotonic() - start > max_seconds:
            break
        pseed = program_seed(seed, index)
        if pseed in OLDER_TORCH_BUGS and TORCH_VERSION < OLDER_TORCH_BUGS[pseed][0]:
            stats["declined"] = stats.get("declined", 0) + 1
            done += 1
            continue
        program = generate_op_program(pseed, kinds)
        codegens[program.codegen] += 1
        kind_counts.update(program.kinds)
        try:
            failure = check_op_source(program.source, stats)
        except Exception as exc:  # the runner itself: report, go on
            failure = OpFailure(0, "internal", "runner", f"{type(exc).__name__}: {exc}"[:400])
        done += 1
        if failure is not None:
            signature = "/".join(failure.signature)
            log(f"FAIL program {index} (seed {pseed}, {program.codegen}): {str(failure)[:300]}")
            record: dict[str, Any] = {
                "index": index,
                "program_seed": pseed,
                "codegen": program.codegen,
                "failure": str(failure)[:500],
                "signature": signature,
            }
            first_of_kind = not any(f["signature"] == signature for f in failures)
            source = program.source
            if shrink_failures and first_of_kind:
                source = _shrink(source, failure)
            if first_of_kind:
                record["source"] = source
                if save_dir is not None:
                    record["saved"] = str(
                        save_op_regression(save_dir, f"opfuzz_{pseed}", source, failure)
                    )
            failures.append(record)
        if done % 25 == 0:
            log(f"{done} programs, {len(failures)} failures, {time.monotonic() - start:.0f}s")
    return {
        "seed": seed,
        "first": first,
        "shard": f"{k}/{n}",
        "programs": done,
        "codegens": dict(codegens),
        "op_kinds": dict(kind_counts),
        "graphs_compiled": stats.get("graphs", 0),
        "yardstick_runs": stats.get("yardstick_runs", 0),
        "declined": stats.get("declined", 0),
        "failure_kinds": dict(Counter(f["signature"] for f in failures)),
        "failures": failures,
        "seconds": round(time.monotonic() - start, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.op_campaign", description=__doc__)
    parser.add_argument("--programs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--no-shrink", action="store_true")
    parser.add_argument("--save-dir", default=str(Path(__file__).parent / "regressions"))
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--max-seconds", type=float, default=0.0)
    parser.add_argument("--kinds", default="", help="only these op kinds: " + ", ".join(OP_KINDS))
    parser.add_argument("--shard", default="0/1")
    parser.add_argument("--report", default="")
    args = parser.parse_args(argv)
    shard_k, shard_n = (int(p) for p in args.shard.split("/"))
    summary = run_op_campaign(
        seed=args.seed,
        programs=args.programs,
        first=args.first,
        shrink_failures=not args.no_shrink,
        save_dir=None if args.no_save else Path(args.save_dir),
        max_seconds=args.max_seconds or None,
        kinds=[k for k in args.kinds.split(",") if k] or None,
        log=lambda line: print(line, flush=True),
        shard=(shard_k, shard_n),
    )
    text = json.dumps(summary, indent=2)
    print(text)
    if args.report:
        Path(args.report).write_text(text)
    return 1 if summary["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
