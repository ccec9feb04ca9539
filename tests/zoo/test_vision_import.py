"""torchvision and timm import on CPU machines whose torchvision wheel is a CUDA build."""

from __future__ import annotations

import pytest
import torch

from benchmarks.zoo.vision import import_timm, import_torchvision, torchvision_ops_loaded


def test_torchvision_classification_model_matches_a_second_import() -> None:
    torchvision = import_torchvision()
    assert import_torchvision() is torchvision
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=7).eval()
    x = torch.randn(2, 3, 32, 32)
    out = model(x)
    assert out.shape == (2, 7)
    assert torch.isfinite(out).all()


def test_timm_imports_after_torchvision() -> None:
    timm = import_timm()
    model = timm.create_model("convnext_atto", pretrained=False, num_classes=5).eval()
    assert model(torch.randn(1, 3, 32, 32)).shape == (1, 5)


def test_detection_ops_raise_a_clear_error_or_work() -> None:
    torchvision = import_torchvision()
    boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 11.0, 11.0], [50.0, 50, 60, 60]])
    scores = torch.tensor([0.9, 0.8, 0.7])
    if torchvision_ops_loaded():
        assert torchvision.ops.nms(boxes, scores, 0.5).tolist() == [0, 2]
        return
    with pytest.raises(RuntimeError, match="custom C"):
        torchvision.ops.nms(boxes, scores, 0.5)
    with pytest.raises(RuntimeError, match="unavailable"):
        torch.ops.torchvision.nms(boxes, scores, 0.5)


def test_python_nms_keeps_what_a_plain_loop_keeps() -> None:
    from benchmarks.zoo.detection import nms_reference

    boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 11.0, 11.0], [50.0, 50, 60, 60]])
    assert nms_reference(boxes, torch.tensor([0.9, 0.8, 0.7]), 0.5).tolist() == [0, 2]
    assert nms_reference(boxes[:0], torch.tensor([]), 0.5).tolist() == []
    gen = torch.Generator().manual_seed(0)
    corner = torch.rand(200, 2, generator=gen) * 50
    boxes = torch.cat([corner, corner + 1 + torch.rand(200, 2, generator=gen) * 20], 1)
    scores = torch.rand(200, generator=gen)

    def iou(a: list[float], b: list[float]) -> float:
        w = max(min(a[2], b[2]) - max(a[0], b[0]), 0.0)
        h = max(min(a[3], b[3]) - max(a[1], b[1]), 0.0)
        area = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1])
        return w * h / (area - w * h)

    kept: list[int] = []
    for i in sorted(range(200), key=lambda k: -scores[k].item()):
        if all(iou(boxes[i].tolist(), boxes[k].tolist()) <= 0.3 for k in kept):
            kept.append(i)
    assert nms_reference(boxes, scores, 0.3).tolist() == kept
