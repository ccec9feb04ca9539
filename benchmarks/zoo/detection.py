"""torchvision detection models on a CPU machine whose torchvision C++ ops do not load.

Detection needs two of those ops: ``nms`` (the region proposals and the per-class box
post-processing) and ``roi_align`` (the box and mask heads' pooling). Where the extension does
not load (``vision.torchvision_ops_loaded()`` is False: a CUDA build of torchvision on a
CPU-only torch), ``python_detection_ops()`` supplies both in plain torch, for benchmarks only:

- ``torchvision::nms`` gets a CPU kernel (below) in place of the one that raises, and
  ``torchvision.ops.nms`` stops asserting that the extension loaded. The op stays an op with
  torchvision's own fake kernel (its output size is data-dependent), so compilers see what they
  see with the real extension.
- ``roi_align`` already has a pure-torch form in torchvision (``ops.roi_align._roi_align``), which
  it uses when the extension is missing, wrapped in a lazy ``torch.compile``; that wrapper is
  replaced by the function it wraps, so eager runs eager ops and each compiler traces them.

Where the extension loads this does nothing.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import torch

from .vision import import_torchvision, torchvision_ops_loaded

__all__ = ["nms_reference", "python_detection_ops"]

_INSTALLED: list[torch.library.Library] = []


@torch.compiler.disable
def nms_reference(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """torchvision's NMS: boxes by decreasing score, each dropping the later boxes whose IoU
    with it exceeds ``iou_threshold``; the indices kept, by decreasing score.

    A kernel, as the C++ one is: never compiled (a compiler's frame hook would otherwise
    capture this Python kernel when the op runs eagerly after a break, adding breaks)."""
    order = torch.sort(scores, descending=True, stable=True).indices
    b = boxes[order]
    x1, y1, x2, y2 = b.unbind(1)
    areas = (x2 - x1) * (y2 - y1)
    w = (torch.minimum(x2[:, None], x2) - torch.maximum(x1[:, None], x1)).clamp(min=0)
    h = (torch.minimum(y2[:, None], y2) - torch.maximum(y1[:, None], y1)).clamp(min=0)
    inter = w * h
    later_overlaps = (inter / (areas[:, None] + areas - inter) > iou_threshold).triu(1)
    removed = torch.zeros(len(order), dtype=torch.bool)
    keep = []
    for i in range(len(order)):
        if not removed[i]:
            keep.append(i)
            removed |= later_overlaps[i]
    return order[torch.tensor(keep, dtype=torch.int64)]


def python_detection_ops() -> Any:
    """Make torchvision's detection models run on this machine (see the module docstring);
    returns torchvision."""
    torchvision = import_torchvision()
    if torchvision_ops_loaded() or _INSTALLED:
        return torchvision
    library = torch.library.Library("torchvision", "IMPL", "CPU")  # type: ignore[no-untyped-call]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # replaces vision.py's kernel that raises
        library.impl("nms", nms_reference)  # type: ignore[no-untyped-call]
    _INSTALLED.append(library)
    import torchvision.ops.boxes

    torchvision.ops.boxes._assert_has_ops = lambda: None
    roi_align = sys.modules["torchvision.ops.roi_align"]
    roi_align._roi_align = getattr(roi_align._roi_align, "__wrapped__", roi_align._roi_align)
    return torchvision
