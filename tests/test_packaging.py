"""Each package builds on its own: its own wheel, version, dependencies and py.typed."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["evalframe", "guards", "fxbuild", "symbolic_vm", "aot", "inductor_lite", "compile_api"]
# What each package may depend on among Strata's packages (ARCHITECTURE.md's table).
STRATA_DEPS = {
    "evalframe": set(),
    "guards": set(),
    "fxbuild": set(),
    "symbolic_vm": {"strata-guards", "strata-fxbuild"},
    "aot": set(),
    "inductor_lite": {"strata-aot"},
    "compile_api": {
        "strata-evalframe",
        "strata-guards",
        "strata-fxbuild",
        "strata-symbolic-vm",
        "strata-aot",
        "strata-inductor-lite",
    },
}


def _requirement_name(line: str) -> str:
    spec = line.split(":", 1)[1].split(";", maxsplit=1)[0].strip()
    for sep in "<>=!~ [(":
        spec = spec.split(sep)[0]
    return spec.strip().lower()


@pytest.mark.parametrize("name", PACKAGES)
def test_package_builds_a_wheel_on_its_own(tmp_path: Path, name: str) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(ROOT / "packages" / name),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        files = zf.namelist()
        metadata = next(f for f in files if f.endswith(".dist-info/METADATA"))
        meta = zf.read(metadata).decode()
    assert f"{name}/__init__.py" in files
    assert f"{name}/py.typed" in files
    assert "Version: 0.1.0" in meta
    requires = {
        _requirement_name(line)
        for line in meta.splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    }
    assert {r for r in requires if r.startswith("strata-")} == STRATA_DEPS[name]
    if name == "evalframe":
        assert "torch" not in requires
        assert any(f.startswith("evalframe/_evalframe") and f.endswith(".so") for f in files)
    elif name == "guards":
        # Its optional C++ fast path, built against the torch installed here (no build
        # isolation); the package still works without it (pure-Python check).
        assert any(f.startswith("guards/_tensor_guards") and f.endswith(".so") for f in files)
        assert "torch" in requires
    else:
        assert "torch" in requires
