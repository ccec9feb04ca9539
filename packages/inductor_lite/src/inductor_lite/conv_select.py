"""A convolution's layout and aten kernel, chosen by timing them once per shape.

aten's CPU convolution picks its kernel by rule: oneDNN, or the "thnn" im2col + GEMM kernel
(``_slow_conv2d_forward``) for an unstrided 1x1 convolution of a small batch on one thread,
and for an NCHW input with a large weight. Neither layout nor kernel wins everywhere at
batch 1 (one core, resnet50 at 96x96, best of 5):

- 512x512x3x3 on a 3x3 image: aten's NCHW pick (thnn) 3.8 ms, oneDNN on the same NCHW
  operands 2.4 ms, channels-last 3.1 ms with the weight's copy;
- 1x1 stride 2, 1024 -> 2048 channels on 6x6: NCHW 1.6 ms, channels-last (aten picks
  oneDNN) 6.5-7.2 ms, thnn on the channels-last operands 2.0 ms;
- 1x1, 512 -> 2048 on 3x3: NCHW 1.6 ms, channels-last thnn 0.6 ms.

So every eligible convolution's candidates (``candidates``) are timed at compile time on
random data of its shapes, each with the per-call copy of the weight into channels-last
where that layout needs one (a graph input weight is copied on every call), best of
``_REPS`` alternating calls (a machine that slows down meanwhile slows all alike). A
candidate whose result has other strides than its layout promises, or other values than
aten's convolution, is not chosen. Channels-last keeps the activations' layout for the
kernels around the convolution, so an NCHW candidate must beat the best channels-last one by
5%, a grouped one by 20% (``_NCHW_MARGIN``). The answer is kept in ``conv_layouts.json`` in
the kernel cache directory (keyed by shapes, arguments, whether the weight needs the copy,
thread count and torch version), so a shape is timed once per machine; every choice is
logged on ``strata.kernel_choices``.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from .cache import ensure_private_dir, read_choices, store_choice
from .choices import choice as choice_log

__all__ = [
    "DEFAULT",
    "Algorithm",
    "ConvPlan",
    "Layout",
    "call_target",
    "candidates",
    "measured_conv",
]

log = logging.getLogger("strata.inductor_lite")

aten = torch.ops.aten

_REPS = 5
# part of every key: bumped when what is timed or chosen changes (4: kernels as well as
# layouts; 6: the margins for NCHW)
_KEY_VERSION = 6
_FILE = "conv_layouts.json"
# An NCHW candidate is chosen only when this much faster than the best channels-last one:
# timed alone it misses what it costs in a channels-last model (its input and output change
# layout, oneDNN reorders NCHW activations into its blocked layout and back), most for a
# grouped convolution, whose compute is small against those reorders. regnety_002's grouped
# 368x8x3x3 convolutions timed 69 us NCHW against 81 channels-last, and the model ran
# 6.04 ms with them NCHW, 5.40 ms channels-last; resnet50's dense NCHW wins hold in the
# model (39.4 ms with a 5% margin, 41.0 with 20%).
_NCHW_MARGIN = 0.95
_NCHW_MARGIN_GROUPED = 0.8


class Layout(enum.Enum):
    NHWC = "nhwc"
    NCHW = "nchw"


class Algorithm(enum.Enum):
    ATEN = "aten"  # aten.convolution: aten picks the kernel
    ONEDNN = "onednn"  # aten.mkldnn_convolution
    THNN = "thnn"  # aten._slow_conv2d_forward (im2col + GEMM)


@dataclass(frozen=True)
class ConvPlan:
    """Where a convolution's operands live and which aten kernel runs it."""

    layout: Layout
    algorithm: Algorithm

    def __str__(self) -> str:
        return f"{self.layout.value}/{self.algorithm.value}"

    @staticmethod
    def parse(text: str) -> ConvPlan | None:
        layout, _, algorithm = text.partition("/")
        try:
            return ConvPlan(Layout(layout), Algorithm(algorithm))
        except ValueError:
            return None


DEFAULT = ConvPlan(Layout.NHWC, Algorithm.ATEN)

_MEMO: dict[tuple[Path, str], ConvPlan] = {}


def candidates(groups: int, dilation: Sequence[int]) -> list[ConvPlan]:
    """The plans worth timing for a 2-d float32 convolution (thnn: no groups, no dilation)."""
    plans = [
        DEFAULT,
        ConvPlan(Layout.NCHW, Algorithm.ATEN),
        ConvPlan(Layout.NCHW, Algorithm.ONEDNN),
    ]
    if groups == 1 and all(int(d) == 1 for d in dilation):
        plans.append(ConvPlan(Layout.NHWC, Algorithm.THNN))
    return plans


def call_target(  # noqa: PLR0917
    plan: ConvPlan,
    x: object,
    weight: object,
    bias: object,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
    kernel_size: Sequence[int],
) -> tuple[torch._ops.OpOverload, tuple[object, ...]]:
    """The aten op and arguments that run ``plan`` (``x``/``weight`` already in its layout)."""
    st, pad, dil = list(stride), list(padding), list(dilation)
    if plan.algorithm is Algorithm.ONEDNN:
        return aten.mkldnn_convolution.default, (x, weight, bias, pad, st, dil, groups)
    if plan.algorithm is Algorithm.THNN:
        return aten._slow_conv2d_forward.default, (x, weight, list(kernel_size), bias, st, pad)
    args = (x, weight, bias, st, pad, dil, False, [0, 0], groups)
    return aten.convolution.default, args


def _best_times(fns: Sequence[Callable[[], object]]) -> list[float]:
    """The best time of each of ``fns`` over ``_REPS`` rounds calling each once."""
    for fn in fns:  # oneDNN builds its primitive on the first call
        fn()
    best = [float("inf")] * len(fns)
    for _ in range(_REPS):
        for k, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t0)
    return best


def _key(  # noqa: PLR0917
    x_sizes: Sequence[int],
    w_sizes: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
    weight_copy: bool,
) -> str:
    parts = (
        _KEY_VERSION,
        tuple(int(s) for s in x_sizes),
        tuple(int(s) for s in w_sizes),
        tuple(int(s) for s in stride),
        tuple(int(s) for s in padding),
        tuple(int(s) for s in dilation),
        int(groups),
        weight_copy,
        torch.get_num_threads(),
        torch.__version__,
    )
    return repr(parts)


def _runner(
    target: Callable[..., object],
    args: tuple[object, ...],
    copy: tuple[torch.Tensor, torch.Tensor] | None,
) -> Callable[[], object]:
    if copy is None:
        return lambda: target(*args)
    dst, src = copy

    def run() -> object:
        # the per-call weight copy as the graph makes it: into memory kept between calls
        dst.copy_(src)
        return target(*args)

    return run


def _time_plans(  # noqa: PLR0917
    plans: Sequence[ConvPlan],
    x_sizes: Sequence[int],
    w_sizes: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
    weight_copy: bool,
) -> dict[ConvPlan, float]:
    """Each plan that gives aten's values in its promised layout -> its best time (s)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(*x_sizes, generator=gen)
    w = torch.randn(*w_sizes, generator=gen)
    inputs = {
        Layout.NCHW: (x, w),
        Layout.NHWC: (
            x.contiguous(memory_format=torch.channels_last),
            torch.empty_like(w, memory_format=torch.channels_last).copy_(w),
        ),
    }
    reference = aten.convolution.default(x, w, None, list(stride), list(padding),
                                         list(dilation), False, [0, 0], groups)  # fmt: skip
    runs: list[tuple[ConvPlan, Callable[[], object]]] = []
    for plan in plans:
        xi, wi = inputs[plan.layout]
        target, args = call_target(plan, xi, wi, None, stride, padding, dilation, groups,
                                   w_sizes[2:])  # fmt: skip
        try:
            out = target(*args)
        except RuntimeError as exc:  # a kernel that refuses these arguments
            log.debug("convolution plan %s refused: %s", plan, exc)
            continue
        memory_format = torch.channels_last if plan.layout is Layout.NHWC else None
        promised = (
            out.is_contiguous(memory_format=memory_format)
            if memory_format is not None
            else out.is_contiguous()
        )
        if not promised or not torch.allclose(out, reference, rtol=1e-3, atol=1e-3):
            log.debug("convolution plan %s: other layout or values, not chosen", plan)
            continue
        copy = (wi, w) if plan.layout is Layout.NHWC and weight_copy else None
        runs.append((plan, _runner(target, args, copy)))
    times = _best_times([fn for _, fn in runs])
    return {plan: t for (plan, _), t in zip(runs, times, strict=True)}


def _pick(times: dict[ConvPlan, float], groups: int = 1) -> ConvPlan:
    if not times:
        return DEFAULT
    best = min(times, key=times.__getitem__)
    nhwc = [p for p in times if p.layout is Layout.NHWC]
    if best.layout is Layout.NCHW and nhwc:
        best_nhwc = min(nhwc, key=times.__getitem__)
        margin = _NCHW_MARGIN if groups == 1 else _NCHW_MARGIN_GROUPED
        if times[best] >= margin * times[best_nhwc]:
            return best_nhwc
    return best


def measured_conv(  # noqa: PLR0917
    cache_dir: Path,
    x_sizes: Sequence[int],
    w_sizes: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
    weight_copy: bool,
) -> ConvPlan:
    """The fastest plan for this float32 convolution, per call (``weight_copy``: whether a
    channels-last plan copies the weight on every call)."""
    key = _key(x_sizes, w_sizes, stride, padding, dilation, groups, weight_copy)
    memo = (cache_dir, key)
    if memo in _MEMO:
        return _MEMO[memo]
    directory = ensure_private_dir(cache_dir)
    path = directory / _FILE
    known = read_choices(path, lambda v: ConvPlan.parse(v) is not None)
    if key in known:
        plan = ConvPlan.parse(known[key])
        assert plan is not None
        _MEMO[memo] = plan
        return plan
    with torch.no_grad():
        times = _time_plans(
            candidates(groups, dilation), x_sizes, w_sizes, stride, padding, dilation, groups,
            weight_copy,
        )  # fmt: skip
    plan = _pick(times, groups)
    timed = ", ".join(f"{p} {t * 1e6:.0f}" for p, t in times.items())
    what = f"convolution x{tuple(x_sizes)} w{tuple(w_sizes)} stride {tuple(stride)}"
    choice_log(what, str(plan), "timed, us: %s", timed)
    log.debug("%s: %s -> %s (measured)", what, timed, plan)
    store_choice(directory, path, key, str(plan))
    _MEMO[memo] = plan
    return plan
