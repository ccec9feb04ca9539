"""The layer's one configuration object."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch

__all__ = ["InductorConfig", "default_cache_dir"]


def default_cache_dir() -> Path:
    """Where compiled kernels live unless configured otherwise.

    ``STRATA_CACHE_DIR`` wins, then ``$XDG_CACHE_HOME/strata/inductor_lite``, then
    ``~/.cache/strata/inductor_lite``.
    """
    env = os.environ.get("STRATA_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "strata" / "inductor_lite"


def _default_threads() -> int:
    # torch's own setting: kernels use what the user gave torch.set_num_threads, and setting the
    # OpenMP count (shared with torch's runtime) to it leaves torch's thread count unchanged.
    return max(1, torch.get_num_threads())


@dataclass
class InductorConfig:
    """Settings for compile_fx.

    ``fallback`` decides what a lowering or compiler failure does: ``"eager"`` runs the
    graph as it came (one warning), ``"raise"`` re-raises (for tests and debugging).
    """

    cache_dir: Path = field(default_factory=default_cache_dir)
    cxx: str = field(default_factory=lambda: os.environ.get("CXX", "g++"))
    cflags: tuple[str, ...] = (
        "-O3",
        "-march=native",
        # GCC defaults to 256-bit vectors even where AVX-512 exists; eager's kernels use 512
        # (a no-op on CPUs without AVX-512)
        "-mprefer-vector-width=512",
        "-fopenmp",
        "-shared",
        "-fPIC",
        "-fno-math-errno",
        # lets floor/round vectorise; we never read floating-point exception flags
        "-fno-trapping-math",
        "-std=c++17",
    )
    num_threads: int = field(default_factory=_default_threads)
    compile_timeout_s: float = 120.0
    fallback: Literal["eager", "raise"] = "eager"
    # "auto": C++ for CPU tensors, Triton for CUDA ones; "triton" forces Triton (CPU tensors
    # then need TRITON_INTERPRET=1, which is how the Triton path is tested without a GPU)
    codegen: Literal["auto", "cpp", "triton"] = "auto"
    # (kernel source hash, kernel name) -> chosen (XBLOCK, RBLOCK): timed once, then reused
    triton_autotune_cache: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    # threads compiling a kernel's block-size candidates side by side (1: one at a time)
    triton_compile_threads: int = 8
    # reach aten through the aot layer (training works); False traces for inference only
    use_aot: bool = True
    # Below this many scalar iterations a kernel runs on one thread: forking costs more.
    parallel_threshold: int = 32768
    # A pointwise value read by more than one consumer is recomputed (inlined) while its
    # expression stays this cheap, and stored to memory otherwise.
    inline_cost_limit: int = 24
    # ... and while it reads at most this many buffers (each consumer re-reads them all)
    inline_load_limit: int = 3
    # ... on CUDA (Triton): each buffer an inlined value reads stays alive until its last
    # reader runs, so a residual stream x + attn + mlp inlined into the next layer kept three
    # buffers where one stored sum does (peak memory, gpt4)
    triton_inline_load_limit: int = 2
    # ... and at most this many of them not much smaller than the value (a per-row max or
    # a per-column weight is not counted): a stored residual sum a + b lets a and b die at
    # the next layer norm, where inlined they both stay alive until the next residual add
    # (gpt4's inference peak 8 -> 7 MiB, transformer_block_train's step 19 -> 18 MiB on the
    # meta-tensor simulations)
    triton_inline_full_reads: int = 1
    # Let float and double sin/cos/tan/log/exp2/expm1/log1p/atan/pow/... vectorise through
    # glibc's libmvec when a probe shows it links and runs (else they stay scalar libm).
    vector_libm: bool = True
    # Hand 2-d float32 convolutions on CPU a channels-last input (op_lowerings/convolutions.py):
    # oneDNN uses it as is instead of reordering an NCHW input on every call.
    conv_channels_last: bool = True
    # Fold a float32 CPU convolution's per-channel affine epilogue (eval-mode batch norm)
    # into its weight and bias, and a ReLU after it into oneDNN's post-op (conv_fold.py).
    conv_fold_epilogue: bool = True
    # A computed value of at most this many elements that a consumer 16x its size
    # broadcasts is stored (computed once), not recomputed per element of the consumer.
    small_broadcast_numel: int = 16384
    # Let the kernel computing a graph input's new value (an optimizer step's p - lr * g)
    # store it into the input's memory where that is safe (input_writes.py); False computes
    # it into a new buffer and copies it into the input at the end.
    write_inputs_in_place: bool = True
    # Record each CUDA graph's kernel launches into a CUDA graph and replay it per call
    # (cudagraphs.py; compile_api's mode="reduce-overhead" sets it).
    cudagraphs: bool = False
    # Time a Triton matmul template (its pointwise consumer fused) against aten's matmul for
    # each CUDA mm/addmm/bmm with static sizes and keep the faster (autotune.py; compile_api's
    # mode="max-autotune" and "max-autotune-no-cudagraphs" set it).
    max_autotune: bool = False
    # C++ wrapper: up to this many bytes of intermediate buffers (static sizes, never returned)
    # are allocated once and kept between calls instead of per call (kept_buffers.py); 0: none.
    kept_buffer_bytes: int = 16 << 20

    def __post_init__(self) -> None:
        self.cache_dir = Path(self.cache_dir)
