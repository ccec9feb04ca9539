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


def _append_to(tree: Path, module: str, line: str) -> None:
    package, *rest = module.split(".")
    path = tree / "packages" / package / "src" / package / ("/".join(rest) + ".py")
    path.write_text(path.read_text() + f"\n{line}\n")


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        ("compile_api.state", "import compile_api.api", "compile_api's layers"),
        ("guards.errors", "import guards.check_fn", "guards' layers"),
        ("fxbuild.errors", "import fxbuild.builder", "fxbuild's layers"),
        ("symbolic_vm.operations", "import symbolic_vm.builtins_", "symbolic_vm's layers"),
        ("symbolic_vm.breaks.resume", "import symbolic_vm.breaks.policy", "symbolic_vm's layers"),
        ("evalframe.errors", "import attrs", "evalframe's layers"),
        ("aot.errors", "import aot.api", "aot's layers"),
        ("inductor_lite.ir", "import inductor_lite.scheduler", "inductor_lite's layers"),
    ],
)
def test_an_upward_import_inside_a_package_breaks_its_layers(
    tmp_path: Path, module: str, line: str, broken: str
) -> None:
    tree = _copy_tree(tmp_path)
    _append_to(tree, module, line)
    result = _lint(tree)
    assert result.returncode != 0
    out = " ".join(result.stdout.split())
    assert broken in out
    assert out[out.index(broken) :].split("BROKEN")[0].count("KEPT") == 0


PACKAGES = ("evalframe", "guards", "fxbuild", "symbolic_vm", "aot", "inductor_lite", "compile_api")


def _cycles(graph: object, package: str) -> list[list[str]]:
    """Import cycles among a package's modules (imports of the package's own ``__init__`` left
    out: it re-exports the modules, and guards' extension loads as ``from guards import ...``)."""
    import networkx as nx

    modules = set(graph.find_descendants(package))  # type: ignore[attr-defined]
    edges = nx.DiGraph()
    edges.add_nodes_from(modules)
    for m in modules:
        for t in graph.find_modules_directly_imported_by(m):  # type: ignore[attr-defined]
            if t in modules and t != m:
                edges.add_edge(m, t)
    return [sorted(c) for c in nx.strongly_connected_components(edges) if len(c) > 1]


def test_no_import_cycle_inside_any_package() -> None:
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True)
    assert {p: _cycles(graph, p) for p in PACKAGES} == {p: [] for p in PACKAGES}


def test_the_cycle_check_finds_a_cycle() -> None:
    grimp = pytest.importorskip("grimp")
    graph = grimp.ImportGraph()
    for m in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(m)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.a")
    graph.add_import(importer="pkg.c", imported="pkg")
    graph.add_import(importer="pkg", imported="pkg.c")
    assert _cycles(graph, "pkg") == [["pkg.a", "pkg.b"]]
