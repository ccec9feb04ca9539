"""The import-linter contracts in pyproject.toml enforce ARCHITECTURE.md's dependency table.

Runs lint-imports on a copy of the tree, clean and with deliberate violations, so the contract is
proven able to fail (the lint session runs it on the real tree).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")

pytestmark = pytest.mark.skipif(
    not Path(LINT_IMPORTS).exists(), reason="import-linter is not installed in this environment"
)


def _copy_tree(tmp_path: Path) -> Path:
    dest = tmp_path / "tree"
    shutil.copytree(
        ROOT / "packages",
        dest / "packages",
        ignore=shutil.ignore_patterns("tests", "__pycache__", "*.so", "build", "*.egg-info"),
    )
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    src = os.pathsep.join(str(p) for p in sorted((tree / "packages").glob("*/src")))
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache"],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": src},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _append(tree: Path, package: str, line: str) -> None:
    init = tree / "packages" / package / "src" / package / "__init__.py"
    init.write_text(init.read_text() + f"\n{line}\n")


def test_clean_tree_keeps_every_contract(tmp_path: Path) -> None:
    result = _lint(_copy_tree(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("package", "line", "broken"),
    [
        ("guards", "import compile_api", "guards imports only torch BROKEN"),
        (
            "evalframe",
            "import torch",
            "evalframe is the bottom layer and never imports torch BROKEN",
        ),
        ("aot", "import inductor_lite", "aot imports only torch BROKEN"),
        (
            "compile_api",
            "import guards.source",
            "others use only the public API of guards (its __init__), never its modules BROKEN",
        ),
    ],
)
def test_a_bad_import_breaks_the_contract(
    tmp_path: Path, package: str, line: str, broken: str
) -> None:
    tree = _copy_tree(tmp_path)
    _append(tree, package, line)
    result = _lint(tree)
    assert result.returncode != 0
    assert broken in " ".join(result.stdout.split())
