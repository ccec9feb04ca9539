"""Loading generated Triton source and launching its kernels, with a small autotuner.

triton is imported here only, and only when a graph is compiled for Triton.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from .errors import CompilerError
from .triton_codegen import TritonKernelSource, block_candidates

__all__ = ["TritonLauncher", "load_triton_module", "triton_kernels"]

log = logging.getLogger("strata.inductor_lite")


def load_triton_module(source: str) -> ModuleType:
    """Import the generated module (``@triton.jit`` needs a real file to read its source)."""
    try:
        import triton  # noqa: F401
    except ImportError as exc:
        raise CompilerError("triton is not installed (pip install triton)") from exc
    digest = hashlib.sha256(source.encode()).hexdigest()[:24]
    directory = Path(tempfile.mkdtemp(prefix="strata-triton-"))  # private, mode 0700
    path = directory / f"strata_triton_{digest}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"strata_triton_{digest}", path)
    if spec is None or spec.loader is None:
        raise CompilerError(f"cannot import generated Triton module {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TritonLauncher:
    """Launches one kernel; the first call times each block-size candidate and keeps the best."""

    def __init__(
        self,
        fn: Any,
        src: TritonKernelSource,
        key: tuple[str, str],
        choices: dict[tuple[str, str], tuple[int, int]],
    ) -> None:
        self.fn = fn
        self.src = src
        self.key = key
        self.choices = choices

    def _launch(self, cfg: tuple[int, int], tensors: tuple[torch.Tensor, ...]) -> None:
        xblock, rblock = cfg
        grid = ((self.src.rows + xblock - 1) // xblock,)
        self.fn[grid](*tensors, XBLOCK=xblock, RBLOCK=rblock)

    def _tune(self, tensors: tuple[torch.Tensor, ...]) -> tuple[int, int]:
        cands = block_candidates(self.src.rows, self.src.max_inner, self.src.persistent)
        cuda = any(t.is_cuda for t in tensors)
        best: tuple[float, tuple[int, int]] | None = None
        failures: list[str] = []
        for cfg in cands:
            try:
                self._launch(cfg, tensors)  # compile and warm up
            except Exception as exc:  # a block shape the device cannot take: try the next
                failures.append(f"{cfg}: {exc}")
                continue
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(3):
                self._launch(cfg, tensors)
            if cuda:
                torch.cuda.synchronize()
            elapsed = time.perf_counter() - t0
            if best is None or elapsed < best[0]:
                best = (elapsed, cfg)
        if best is None:
            raise CompilerError(
                f"no block size works for Triton kernel {self.src.name}: " + "; ".join(failures)
            )
        log.debug("autotuned %s: XBLOCK=%d RBLOCK=%d", self.src.name, *best[1])
        return best[1]

    def __call__(self, *tensors: torch.Tensor) -> None:
        cfg = self.choices.get(self.key)
        if cfg is None:
            cfg = self._tune(tensors)
            self.choices[self.key] = cfg
        self._launch(cfg, tensors)


def triton_kernels(
    source: str,
    sources: list[TritonKernelSource],
    choices: dict[tuple[str, str], tuple[int, int]],
) -> dict[str, tuple[Callable[..., None], tuple[str, ...]]]:
    """Launchers for every kernel of a generated module, keyed by kernel name."""
    module = load_triton_module(source)
    digest = hashlib.sha256(source.encode()).hexdigest()
    return {
        s.name: (TritonLauncher(getattr(module, s.name), s, (digest, s.name), choices), s.params)
        for s in sources
    }
