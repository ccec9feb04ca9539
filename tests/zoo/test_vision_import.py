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
