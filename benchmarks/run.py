"""Side-by-side benchmarks of eager, Strata and torch.compile: ``python benchmarks/run.py --help``.

See benchmarks/README.md for what is measured and how.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The harness and workloads live beside this script and are not installed packages.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
