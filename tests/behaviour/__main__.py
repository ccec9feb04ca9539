"""``python -m tests.behaviour``: the corpus's pass rate against torch.compile, and each miss."""

from __future__ import annotations

import sys

from .corpus import CASES
from .measure import run


def main() -> int:
    results = [run(c) for c in CASES]
    wrong = [r for r in results if not r.same_as_eager]
    fewer = [r for r in results if r.same_as_eager and not r.captured_like_torch]
    passed = sum(r.passed for r in results)
    print(f"{passed}/{len(results)} cases ({100 * passed / len(results):.1f}%) match eager and "
          "torch.compile's capture")
    for r in wrong:
        print(f"  WRONG  {r.name}: {r.detail}")
    for r in fewer:
        print(f"  GAP    {r.name}: Strata {r.graphs} graphs / {r.breaks} breaks, "
              f"torch {r.torch_graphs} / {r.torch_breaks}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
