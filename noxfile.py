"""Strata's sessions: tests, typecheck, lint, demo, bench (see README.md)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import nox

nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests", "typecheck", "lint"]

ROOT = Path(__file__).parent
# Dependency order: each package after those it imports.
PACKAGES = ["evalframe", "guards", "fxbuild", "symbolic_vm", "aot", "inductor_lite", "compile_api"]
PACKAGE_DIRS = [str(ROOT / "packages" / name) for name in PACKAGES]
SRC_DIRS = [str(ROOT / "packages" / name / "src") for name in PACKAGES]
# The CPU wheel: pip finds it locally; pinning it keeps pip from pulling a CUDA build.
TORCH = "torch==2.13.0"
# triton has no torch dependency; on CPU its interpreter (TRITON_INTERPRET=1) runs the Triton tests.
TRITON = "triton==3.6.0"
TEST_DEPS = [
    "numpy",
    "import-linter>=2.0",
    "pytest>=8",
    # spreads the suite's files over the machine's cores (CI has 2; the suite passes under
    # -n 16 on the GPU machine): a runner of our own would not do better
    "pytest-xdist>=3.5",
    "hypothesis>=6",
    "networkx>=3",
    "attrs>=23",
    "typing-extensions>=4.8",
    # test-only: evalframe proves coverage.py keeps measuring with the hook installed
    "coverage>=7",
    # test-only: compile_api's structured trace is checked by rendering it (a prebuilt wheel)
    "tlparse>=0.4",
    # The model zoo (tests/zoo, benchmarks/zoo). Pinned exactly: torchvision 0.28.0 requires
    # torch==2.13.0, which the CPU wheel satisfies, where a newer torchvision would make pip swap
    # torch for a CUDA build; the strict xfails of the zoo also name these versions' code.
    "torchvision==0.28.0",
    "timm==1.0.31",
    "transformers==5.24.0",
]
# Suites that need no torch, run again on every other CPython we support.
TORCH_FREE_SUITES = {
    "evalframe": ["packages/evalframe/tests"],
    "symbolic_vm.bytecode": ["packages/symbolic_vm/tests/bytecode"],
    # region-level graph breaks on plain values (its folder's conftest imports torch)
    "symbolic_vm.regions": ["packages/symbolic_vm/tests/test_resume_regions.py"],
    "symbolic_vm.break_flow": ["packages/symbolic_vm/tests/test_break_flow.py"],
}
OTHER_PYTHONS = ["3.12", "3.13"]


def _install_strata(session: nox.Session) -> None:
    # Non-editable installs: the tests see exactly what `pip install` of each package gives.
    # One resolve for torch and the libraries that depend on it, so the pins hold together.
    session.install(TORCH, TRITON, *TEST_DEPS)
    session.install("--no-build-isolation", "--no-deps", *PACKAGE_DIRS)
    # The venv must still hold the pinned torch: a library that asked for another version would
    # have made pip replace it (from the registry: a CUDA build, gigabytes, useless on CPU).
    session.run(
        "python",
        "-c",
        f"import torch; assert torch.__version__.split('+')[0] == {TORCH.split('==')[1]!r}, "
        "torch.__version__",
    )


def _other_interpreters() -> list[str]:
    """Interpreters of OTHER_PYTHONS found under pyenv (our machines have them)."""
    try:
        root = subprocess.run(
            ["pyenv", "root"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        root = os.path.expanduser("~/.pyenv")
    found = []
    for minor in OTHER_PYTHONS:
        candidates = sorted(glob.glob(f"{root}/versions/{minor}.*/bin/python{minor}"))
        if candidates:
            found.append(candidates[-1])
    return found


def _run_torch_free_suites(session: nox.Session) -> None:
    for python in _other_interpreters():
        minor = Path(python).name.removeprefix("python")
        venv = ROOT / ".nox" / f"torch-free-{minor}"
        pip = str(venv / "bin" / "pip")
        if not (venv / "bin" / "python").exists():
            session.run(python, "-m", "venv", str(venv), external=True)
            session.run(
                pip,
                "install",
                "-q",
                "pytest>=8",
                "hypothesis>=6",
                "attrs>=23",
                "typing-extensions>=4.8",
                "setuptools>=64",
                "coverage>=7",
                external=True,
            )
        session.run(
            pip,
            "install",
            "-q",
            "--no-build-isolation",
            "--no-deps",
            str(ROOT / "packages" / "evalframe"),
            external=True,
        )
        for name, paths in TORCH_FREE_SUITES.items():
            present = [p for p in paths if (ROOT / p).exists()]
            if not present:
                continue
            session.log(f"torch-free suite {name} on Python {minor}")
            # --confcutdir keeps pytest from loading conftests above the suite (they import
            # torch); a single test file skips conftests altogether.
            isolate = (
                "--noconftest"
                if (ROOT / present[0]).is_file()
                else f"--confcutdir={ROOT / present[0]}"
            )
            session.run(
                str(venv / "bin" / "python"),
                "-m",
                "pytest",
                *present,
                "-p",
                "no:cacheprovider",
                isolate,
                env={"PYTHONPATH": str(ROOT / "packages" / "symbolic_vm" / "src")},
                external=True,
                success_codes=[0, 5],
            )


@nox.session
def tests(session: nox.Session) -> None:
    """Every package's tests and the end-to-end tests, then the torch-free suites on 3.12/3.13."""
    session.install("setuptools>=64", "wheel")
    _install_strata(session)
    # Exit code 5 is pytest's "no tests ran": not a failure of the project.
    # Whole files per worker (--dist loadfile): a file's module-level compiled models and
    # fixtures are built once, as in a serial run.
    default = ["packages", "tests", "-n", "auto", "--dist", "loadfile"]
    session.run("pytest", *(session.posargs or default), success_codes=[0, 5])
    if not session.posargs:
        _run_torch_free_suites(session)


# What the 3.13 slice (and tests312) needs: torch (pip's build of the pinned version for that
# CPython) and the test tools; not the model zoo's libraries, whose tests are not in the slice.
PY313_DEPS = [
    "setuptools>=64",
    "wheel",
    TORCH,
    "numpy",
    "pytest>=8",
    "hypothesis>=6",
    "networkx>=3",
    "attrs>=23",
    "typing-extensions>=4.8",
    "coverage>=7",
]
# The 3.13 slice, run by hand (no local 3.13 CPU torch: see README): the suites whose outcome
# depends on the bytecode of the running CPython (the
# symbolic VM's handlers, the frame hook and guards built for this ABI, the behaviour corpus and
# the fuzzer's fixed-seed programs, each compiled against eager). The rest of the suite goes
# through the same VM on FX graphs, and runs on 3.11 in CI and on 3.13 by hand (tests-3.13).
PY313_SLICE = [
    "packages/symbolic_vm/tests",
    "packages/evalframe/tests",
    "packages/guards/tests",
    "tests/behaviour",
    "tests/fuzz/test_fuzz_ci.py",
]


_BUILD_OUTPUTS = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.so")


def _torch_venv(session: nox.Session, minor: str, *deps: str) -> Path:
    """.nox/py3XX: a venv of pyenv's CPython ``minor`` holding torch, ``deps`` and our packages.

    pip takes torch for cp312/cp313 from the registry (a CUDA build, run on CPU here; our local
    wheels are cp311 only); the pip cache makes a second fresh venv quick. The pin is checked
    after the install, as in _install_strata.
    """
    python = next((p for p in _other_interpreters() if p.endswith(minor)), None)
    if python is None:
        session.skip(f"no CPython {minor} under pyenv")
    venv = ROOT / ".nox" / f"py{minor.replace('.', '')}"
    bin_dir = venv / "bin"
    if not (bin_dir / "python").exists():
        session.run(python, "-m", "venv", str(venv), external=True)
    pip = [str(bin_dir / "python"), "-m", "pip", "install", "-q"]
    # torch pins the triton it was built with; the 3.11 session's TRITON pin does not apply.
    session.run(*pip, *PY313_DEPS, *deps, external=True)
    # pip builds a local folder in place (its build/ and *.egg-info); CI runs this beside the
    # 3.11 session, which builds the same folders: build copies instead.
    with tempfile.TemporaryDirectory() as tmp:
        copies = []
        for package in PACKAGE_DIRS:
            copy = Path(tmp) / Path(package).name
            shutil.copytree(package, copy, ignore=_BUILD_OUTPUTS)
            copies.append(str(copy))
        session.run(*pip, "--no-build-isolation", "--no-deps", *copies, external=True)
    major, minor_number = minor.split(".")
    session.run(
        str(bin_dir / "python"),
        "-c",
        f"import sys, torch; assert sys.version_info[:2] == ({major}, {minor_number}), "
        f"sys.version; assert torch.__version__.split('+')[0] == {TORCH.split('==')[1]!r}, "
        "torch.__version__",
        external=True,
    )
    return bin_dir


def _run_slice(session: nox.Session, version: str) -> None:
    bin_dir = _torch_venv(session, version)
    session.run(
        str(bin_dir / "python"), "-m", "pytest", *(session.posargs or PY313_SLICE),
        "-p", "no:cacheprovider", external=True,
    )


@nox.session(name="tests313", venv_backend="none")
def tests313(session: nox.Session) -> None:
    """The CPython 3.13 slice, torch included (PY313_SLICE), by hand; `-- ARGS` runs pytest ARGS."""
    _run_slice(session, "3.13")


@nox.session(name="tests312", venv_backend="none")
def tests312(session: nox.Session) -> None:
    """The same slice on CPython 3.12, by hand (CI runs 3.12's torch-free suites only)."""
    _run_slice(session, "3.12")


@nox.session(name="tests-3.13", venv_backend="none")
def tests_313(session: nox.Session) -> None:
    """The whole suite, torch included, on CPython 3.13 (pyenv's interpreter), by hand.

    tests313 is the bytecode-dependent slice; this is everything (about an hour on the loaded
    2-core machine,
    docs/python313-2026-11-26.md). inductor_lite's three Triton-interpreter files need no frame
    hook or bytecode and are the slowest; to leave them out:
    ``nox -s tests-3.13 -- packages tests --ignore=packages/inductor_lite/tests/test_triton.py
    --ignore=packages/inductor_lite/tests/test_triton_input_writes.py
    --ignore=packages/inductor_lite/tests/test_triton_memory.py``.
    """
    bin_dir = _torch_venv(session, "3.13", *TEST_DEPS)
    session.run(
        str(bin_dir / "python"), "-m", "pytest", *(session.posargs or ["packages", "tests"]),
        external=True, success_codes=[0, 5],
    )


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict over every package's source."""
    session.install(
        TORCH, "mypy>=1.10", "attrs>=23", "typing-extensions>=4.8", "networkx>=3", "pytest>=8"
    )
    session.run("mypy", *SRC_DIRS)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, and the import-linter contracts that enforce ARCHITECTURE.md's dependency table."""
    session.install("ruff>=0.5", "import-linter>=2.0")
    session.run("ruff", "check", ".")
    session.run("lint-imports", env={"PYTHONPATH": os.pathsep.join(SRC_DIRS)})


@nox.session
def demo(session: nox.Session) -> None:
    """The main job: the TorchDynamo README's toy example through Strata (see README.md)."""
    session.install("setuptools>=64", "wheel")
    _install_strata(session)
    session.run("python", "-m", "compile_api.demo", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Side-by-side benchmarks against eager and torch.compile (see benchmarks/README.md)."""
    session.install("setuptools>=64", "wheel", "matplotlib")
    _install_strata(session)
    session.run("python", "benchmarks/run.py", *session.posargs)
    # The model zoo beside torch.compile (benchmarks/README.md, "The model zoo").
    if not session.posargs:
        session.run("python", "benchmarks/zoo_bench.py", "--threads", "1")


@nox.session
def fuzz(session: nox.Session) -> None:
    """The differential fuzzer: `nox -s fuzz -- --programs N --seed S` (tests/fuzz/README.md)."""
    session.install("setuptools>=64", "wheel")
    _install_strata(session)
    session.run("python", "-m", "tests.fuzz", *session.posargs)
