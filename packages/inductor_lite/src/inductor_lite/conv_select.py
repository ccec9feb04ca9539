"""A convolution's layout chosen by measurement where the cost model cannot tell.

``convolutions`` hands oneDNN a channels-last input and weight (the weight copied on every
call), or keeps eager's NCHW layout where the weight outweighs the output. Between the clear
cases -- a weight needing a copy with between a quarter and four times the output's elements --
neither wins by a margin an element count can call, so the two are timed once, at compile time,
on random data of the convolution's shapes: the channels-last call plus the weight's copy
against the NCHW call, best of ``_REPS`` alternating calls each (a few milliseconds per
shape). The answer is kept in ``conv_layouts.json`` in the kernel cache directory (keyed by
shapes, arguments and thread count), so a shape is timed once per machine; every choice is
logged on ``strata.inductor_lite`` at debug level.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from .cache import ensure_private_dir, read_choices, store_choice
from .choices import choice as choice_log

__all__ = ["measured_layout"]

log = logging.getLogger("strata.inductor_lite")

_REPS = 5
# part of every key: bumped when what is timed changes (3: the weight copied into kept
# memory, the two layouts timed alternately)
_KEY_VERSION = 3
_FILE = "conv_layouts.json"
_MEMO: dict[tuple[Path, str], str] = {}


def _best_of_pair(a: Callable[[], object], b: Callable[[], object]) -> tuple[float, float]:
    """The best time of ``a`` and of ``b`` over ``_REPS`` alternating calls (a machine that
    slows down meanwhile slows both alike)."""
    a()  # oneDNN builds its primitive on the first call
    b()
    best = [float("inf"), float("inf")]
    for _ in range(_REPS):
        for k, fn in enumerate((a, b)):
            t0 = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t0)
    return best[0], best[1]


def measured_layout(  # noqa: PLR0917
    cache_dir: Path,
    x_sizes: Sequence[int],
    w_sizes: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
) -> str:
    """``"nhwc"`` or ``"nchw"``: the faster layout for this float32 convolution, per call."""
    key = repr(
        (
            _KEY_VERSION,
            tuple(x_sizes),
            tuple(w_sizes),
            tuple(stride),
            tuple(padding),
            tuple(dilation),
            groups,
            torch.get_num_threads(),
        )
    )
    memo = (cache_dir, key)
    if memo in _MEMO:
        return _MEMO[memo]
    directory = ensure_private_dir(cache_dir)
    path = directory / _FILE
    known = read_choices(path, lambda v: v in ("nhwc", "nchw"))
    if key in known:
        _MEMO[memo] = known[key]
        return known[key]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(*x_sizes, generator=gen)
    w = torch.randn(*w_sizes, generator=gen)
    x_cl = x.contiguous(memory_format=torch.channels_last)
    w_cl = torch.empty_like(w, memory_format=torch.channels_last)
    args = (list(stride), list(padding), list(dilation), False, [0, 0], groups)

    def nhwc() -> object:
        # the per-call weight copy, as the graph makes it: a kernel storing into a buffer
        # kept between calls (aten's clone allocates and costs twice as much: a 208x8x3x3
        # grouped weight, clone 107 us with the call vs NCHW 102; in the model, the kernel's
        # copy 6 us + channels-last 66 us vs NCHW 99)
        w_cl.copy_(w)
        return torch.ops.aten.convolution.default(x_cl, w_cl, None, *args)

    def nchw() -> object:
        return torch.ops.aten.convolution.default(x, w, None, *args)

    with torch.no_grad():
        t_nhwc, t_nchw = _best_of_pair(nhwc, nchw)
    choice = "nhwc" if t_nhwc <= t_nchw else "nchw"
    choice_log(
        f"convolution x{tuple(x_sizes)} w{tuple(w_sizes)}",
        "channels-last" if choice == "nhwc" else "NCHW",
        "timed: channels-last %.0f us, NCHW %.0f us",
        t_nhwc * 1e6,
        t_nchw * 1e6,
    )
    log.debug(
        "convolution x%s w%s: channels-last %.0f us, NCHW %.0f us -> %s (measured)",
        tuple(x_sizes),
        tuple(w_sizes),
        t_nhwc * 1e6,
        t_nchw * 1e6,
        choice,
    )
    store_choice(directory, path, key, choice)
    _MEMO[memo] = choice
    return choice
