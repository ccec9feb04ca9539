"""An outside check of timm and torchvision models that are not in the zoo (not a CI test).

``python benchmarks/vision_sweep.py [NAME ...] [--json FILE] [--timeout S]`` runs each named model
(default: all of ``SPECS``) in its own subprocess (``--one NAME``, killed after ``--timeout``
seconds), one at a time. Each model is built with seeded random weights, batch 2, a small image
(32-75 px, the smallest its architecture takes), and run in eval mode:

- eagerly (the reference);
- under ``compile_api.compile`` with the ``eager`` backend and with ``aot_eager``;
- under ``torch.compile(backend="eager")`` (the graph and break reference);
- for the models marked ``train``: forward, cross-entropy loss and backward in train mode
  (dropout off), under Strata's ``aot_eager`` and torch's ``eager``; the loss, every gradient and
  the float buffers (batch-norm statistics) are compared with eager's;
- for the models marked ``inductor``: Strata's default backend (inductor_lite) in inference.

Graphs are those the (counting) backend is handed; breaks are one per frame that broke, for both
compilers (``zoo.measure``). Results are compared with ``zoo.measure.tolerance``: float32
throughout; eager and aot_eager run the same aten kernels in the same order, so 1e-4 relative /
1e-5 absolute is far above float32 rounding of identical computations yet far below any real
error; inductor reorders reductions and gets 1e-3 / 1e-4.

A Strata compile that fell back to eager (the "could not compile" warning) is a crash even when the
result is right. torchvision's CUDA wheel on this CPU machine is imported as the zoo does
(``zoo.vision.import_torchvision``). The table is printed; ``--json FILE`` writes every row.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from benchmarks.zoo.measure import Outcome, run_eager, run_strata, run_torch, tolerance  # noqa: E402
from benchmarks.zoo.models import BATCH, CLASSES, Built, Case, ZooModel, _generator, _seeded  # noqa: E402
from benchmarks.zoo.vision import import_timm, import_torchvision  # noqa: E402


@dataclass(frozen=True)
class Spec:
    """A model of the sweep: how to build it, its image size (``frames``: a video clip's length),
    and which extra runs it gets."""

    name: str
    library: str
    make: Callable[[], nn.Module]
    image: int = 32
    train: bool = False
    inductor: bool = False
    frames: int = 0
    channels_last: bool = False
    dynamic: int = 0  # a second call's image size under dynamic=True (batch 3); 0: none


def _timm(name: str, **kwargs: Any) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        timm = import_timm()
        return timm.create_model(name, pretrained=False, num_classes=CLASSES, **kwargs)  # type: ignore[no-any-return]

    return make


def _tv(name: str, **kwargs: Any) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        models = import_torchvision().models
        return getattr(models, name)(num_classes=CLASSES, **kwargs)  # type: ignore[no-any-return]

    return make


def _checkpointed(make: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    """timm's activation checkpointing of every stage (``set_grad_checkpointing``)."""

    def checkpointed() -> nn.Module:
        model = make()
        model.set_grad_checkpointing(True)  # type: ignore[operator]
        return model

    return checkpointed


class _Autocast(nn.Module):
    """A model run under CPU autocast to bfloat16, its logits returned in float32."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.inner(x).float()  # type: ignore[no-any-return]


def _autocast(make: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    return lambda: _Autocast(make())


class _Flow(nn.Module):
    """RAFT's optical flow between an image and its mirror image (2 refinement updates)."""

    def __init__(self, raft: nn.Module) -> None:
        super().__init__()
        self.raft = raft

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return self.raft(x, x.flip(-1), num_flow_updates=2)  # type: ignore[no-any-return]


def _tv_raft() -> nn.Module:
    return _Flow(import_torchvision().models.optical_flow.raft_small(weights=None))


def _tv_segmentation(name: str) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        segmentation = import_torchvision().models.segmentation
        return getattr(segmentation, name)(  # type: ignore[no-any-return]
            weights=None, weights_backbone=None, num_classes=CLASSES
        )

    return make


def _tv_video(name: str) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        video = import_torchvision().models.video
        return getattr(video, name)(num_classes=CLASSES)  # type: ignore[no-any-return]

    return make


SPECS: dict[str, Spec] = {
    s.name: s
    for s in [
        # timm
        Spec("efficientnet_lite0", "timm", _timm("efficientnet_lite0")),
        Spec("levit_128s", "timm", _timm("levit_128s", img_size=64), image=64, train=True),
        Spec("mobilevit_xxs", "timm", _timm("mobilevit_xxs"), image=64, train=True),
        Spec("repvgg_a0", "timm", _timm("repvgg_a0"), inductor=True),
        Spec("ghostnet_050", "timm", _timm("ghostnet_050")),
        Spec("seresnext26d_32x4d", "timm", _timm("seresnext26d_32x4d")),
        Spec("dla34", "timm", _timm("dla34")),
        Spec("hrnet_w18_small", "timm", _timm("hrnet_w18_small"), image=64),
        Spec("fastvit_t8", "timm", _timm("fastvit_t8"), image=64),
        Spec("coat_lite_tiny", "timm", _timm("coat_lite_tiny", img_size=64), image=64),
        Spec("eva02_tiny", "timm", _timm("eva02_tiny_patch14_224", img_size=56), image=56,
             inductor=True),
        Spec("xcit_nano", "timm", _timm("xcit_nano_12_p16_224", img_size=64), image=64),
        Spec("pit_ti", "timm", _timm("pit_ti_224", img_size=64), image=64),
        Spec("nf_resnet26", "timm", _timm("nf_resnet26")),
        Spec("rexnet_100", "timm", _timm("rexnet_100")),
        Spec("mobileone_s0", "timm", _timm("mobileone_s0")),
        Spec("repvit_m1", "timm", _timm("repvit_m1")),
        Spec("gcvit_xxtiny", "timm", _timm("gcvit_xxtiny", img_size=64), image=64),
        Spec("inception_next_tiny", "timm", _timm("inception_next_tiny")),
        Spec("ese_vovnet19b_dw", "timm", _timm("ese_vovnet19b_dw")),
        Spec("efficientvit_b0", "timm", _timm("efficientvit_b0"), image=64),
        # torchvision
        Spec("tv_inception_v3", "torchvision",
             _tv("inception_v3", aux_logits=False, init_weights=True), image=75),
        Spec("tv_densenet121", "torchvision", _tv("densenet121")),
        Spec("tv_regnet_x_400mf", "torchvision", _tv("regnet_x_400mf"), train=True),
        Spec("tv_swin_v2_t", "torchvision", _tv("swin_v2_t"), image=64),
        Spec("tv_efficientnet_v2_s", "torchvision", _tv("efficientnet_v2_s")),
        Spec("tv_resnext50", "torchvision", _tv("resnext50_32x4d"), train=True),
        Spec("tv_mobilenet_v2", "torchvision", _tv("mobilenet_v2"), inductor=True),
        Spec("tv_vgg11_bn", "torchvision", _tv("vgg11_bn")),
        Spec("tv_alexnet", "torchvision", _tv("alexnet"), image=64),
        Spec("tv_lraspp", "torchvision", _tv_segmentation("lraspp_mobilenet_v3_large")),
        Spec("tv_r3d_18", "torchvision", _tv_video("r3d_18"), frames=4),
        # other configurations: channels-last tensors, timm's feature extraction (a list of
        # stage outputs), a ViT taking any image size, activation checkpointing in training
        Spec("tv_resnet18+channels_last", "torchvision", _tv("resnet18"), channels_last=True,
             train=True),
        Spec("resnet18+features_only", "timm", _timm("resnet18", features_only=True)),
        Spec("vit_tiny+dynamic_img_size", "timm", _timm(
            "vit_tiny_patch16_224", img_size=32, dynamic_img_size=True), image=48),
        Spec("resnet18+autocast_bf16", "timm", _autocast(_timm("resnet18"))),
        Spec("tv_raft_small", "torchvision", _tv_raft, image=128),
        Spec("vit_tiny+drop_path", "timm", _timm(
            "vit_tiny_patch16_224", img_size=32, patch_size=8, drop_path_rate=0.2), train=True),
        Spec("levit_128s+dynamic", "timm", _timm("levit_128s", img_size=64), image=64,
             dynamic=64),
        Spec("vit_tiny+dynamic_img_size+dynamic", "timm", _timm(
            "vit_tiny_patch16_224", img_size=32, dynamic_img_size=True), image=48, dynamic=64),
        Spec("tv_resnet18+dynamic", "torchvision", _tv("resnet18"), dynamic=48),
        Spec("tv_swin_v2_t+dynamic", "torchvision", _tv("swin_v2_t"), image=64, dynamic=96),
        Spec("convnext_atto+checkpointing", "timm", _checkpointed(_timm("convnext_atto")),
             train=True),
    ]
}  # fmt: skip


def _no_dropout(model: nn.Module) -> nn.Module:
    """Training runs compare gradients with eager's: random dropout masks would differ."""
    for m in model.modules():
        if isinstance(m, nn.Dropout | nn.Dropout2d | nn.Dropout3d | nn.AlphaDropout):
            m.p = 0.0
    return model


def _built(spec: Spec, train: bool) -> Callable[[], Built]:
    def build() -> Built:
        model = _seeded(spec.make)
        if train:
            _no_dropout(model)
        shape: tuple[int, ...] = (3, spec.image, spec.image)
        if spec.frames:
            shape = (3, spec.frames, spec.image, spec.image)
        x = torch.randn(BATCH, *shape, generator=_generator())
        x2 = torch.randn(BATCH + 1, 3, spec.dynamic, spec.dynamic, generator=_generator(1))
        if spec.channels_last:
            model = model.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
            x2 = x2.contiguous(memory_format=torch.channels_last)
        targets = torch.randint(0, CLASSES, (BATCH,), generator=_generator(4))
        return Built(model, {"x": x}, {"x": x2}, targets=targets)

    return build


def _strata(case: Case, backend: str) -> dict[str, Any]:
    """Strata's counts and crash warnings for one case; the tensors are compared by the caller."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = run_strata(case, backend)
    crashed = [str(w.message) for w in caught if "could not compile" in str(w.message)]
    return {"outcome": ours, "crash": crashed[0].splitlines()[0][:200] if crashed else ""}


def _compare(ours: Outcome, expected: list[torch.Tensor], backend: str) -> str:
    """Empty when every tensor matches eager's; else the first mismatch."""
    if len(ours.tensors) != len(expected):
        return f"{len(ours.tensors)} tensors vs eager's {len(expected)}"
    for i, (a, e) in enumerate(zip(ours.tensors, expected, strict=True)):
        try:
            torch.testing.assert_close(a, e, **tolerance(backend))
        except AssertionError as exc:
            lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
            return f"tensor #{i}: " + "; ".join(lines[:3])
    return ""


def _first(reasons: list[str]) -> str:
    return reasons[0].splitlines()[0][:160] if reasons else ""


def run_one(spec: Spec) -> dict[str, Any]:
    """Every run of one model (see the module docstring), as one row."""
    torch.set_num_threads(1)
    row: dict[str, Any] = {"model": spec.name, "library": spec.library}
    modes = [("infer", ["eager", "aot_eager"] + (["inductor"] if spec.inductor else []))]
    if spec.train:
        modes.append(("train", ["aot_eager"]))
    if spec.dynamic:
        modes.append(("dynamic", ["eager"]))
    for mode, backends in modes:
        case = Case(ZooModel(spec.name, spec.library, _built(spec, mode == "train")), mode)
        start = time.perf_counter()
        try:
            if mode == "infer":
                row["params"] = sum(p.numel() for p in case.model.build().model.parameters())
            expected = run_eager(case)
        except Exception as exc:  # noqa: BLE001 - a model that does not build is reported
            row[f"{mode}:eager_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            continue
        try:
            theirs = run_torch(case, "eager")
            row[f"{mode}:torch"] = [theirs.graphs, theirs.breaks, _first(theirs.reasons)]
        except Exception as exc:  # noqa: BLE001
            row[f"{mode}:torch"] = [None, None, f"{type(exc).__name__}: {exc}"[:200]]
        for backend in backends:
            key = f"{mode}:{backend}"
            try:
                got = _strata(case, backend)
            except Exception as exc:  # noqa: BLE001
                row[key] = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:200],
                            "trace": traceback.format_exc()[-1500:]}  # fmt: skip
                continue
            ours: Outcome = got["outcome"]
            row[key] = {
                "graphs": ours.graphs, "breaks": ours.breaks, "crash": got["crash"],
                "mismatch": _compare(ours, expected, backend), "reason": _first(ours.reasons),
                "seconds": round(ours.seconds, 1),
            }  # fmt: skip
        row[f"{mode}:seconds"] = round(time.perf_counter() - start, 1)
    return row


def _status(row: dict[str, Any], mode: str, backend: str) -> str:
    """One cell: ``graphs/breaks`` and what went wrong."""
    if f"{mode}:eager_error" in row:
        return "no eager"
    got = row.get(f"{mode}:{backend}")
    if got is None:
        return "-"
    if "error" in got:
        return "**error**"
    cell = f"{got['graphs']}/{got['breaks']}"
    if got["mismatch"]:
        cell += " **wrong**"
    if got["crash"]:
        cell += " **crash**"
    theirs = row.get(f"{mode}:torch", [None, None])
    if theirs[0] is not None and (got["graphs"] > theirs[0] or got["breaks"] > theirs[1]):
        cell += " **more**"
    return cell


def markdown(rows: list[dict[str, Any]]) -> str:
    """The table: torch.compile's graphs/breaks beside Strata's per backend and mode."""
    lines = [
        "| model | library | params | torch eager | Strata eager | Strata aot_eager "
        "| train: torch | train: Strata aot_eager | dynamic: torch | dynamic: Strata eager "
        "| Strata inductor | note |",
        "|---|---|---:|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:

        def torch_cell(mode: str) -> str:
            t = r.get(f"{mode}:torch")
            return "-" if t is None else f"{t[0]}/{t[1]}"

        notes = []
        for key, value in r.items():
            if key.endswith("eager_error") or key == "timeout":
                notes.append(f"{key}: {value}")
            elif isinstance(value, dict):
                text = value.get("error") or value.get("mismatch") or value.get("crash") or ""
                if text:
                    notes.append(f"{key}: {text}")
                elif value.get("reason"):
                    notes.append(f"{key} break: {value['reason']}")
        note = "; ".join(notes).replace("|", "\\|")[:300]
        lines.append(
            f"| {r['model']} | {r['library']} | {r.get('params', '-')} | {torch_cell('infer')} "
            f"| {_status(r, 'infer', 'eager')} | {_status(r, 'infer', 'aot_eager')} "
            f"| {torch_cell('train')} | {_status(r, 'train', 'aot_eager')} "
            f"| {torch_cell('dynamic')} | {_status(r, 'dynamic', 'eager')} "
            f"| {_status(r, 'infer', 'inductor')} | {note} |"
        )
    return "\n".join(lines) + "\n"


def _subprocess_row(name: str, timeout: float) -> dict[str, Any]:
    command = [sys.executable, __file__, "--one", name]
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"model": name, "library": SPECS[name].library, "timeout": f"> {timeout:.0f} s"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            row: dict[str, Any] = json.loads(line)
            row["wall"] = round(time.perf_counter() - start, 1)
            return row
    tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
    return {"model": name, "library": SPECS[name].library, "timeout": f"died: {tail[0][:200]}"}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="models of SPECS (default: all)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the worker: one model, one JSON line
    parser.add_argument("--json", help="write the rows here (merged with the rows already there)")
    parser.add_argument("--report", help="print the table of this JSON file and exit")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per model")
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(SPECS[args.one])), flush=True)
        return
    if args.report:
        print(markdown(json.loads(Path(args.report).read_text())))
        return
    unknown = [n for n in args.names if n not in SPECS]
    if unknown:
        parser.error(f"unknown models: {unknown}; known: {' '.join(SPECS)}")
    rows = []
    for name in args.names or list(SPECS):
        row = _subprocess_row(name, args.timeout)
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items()}, default=str)[:2000], flush=True)
        if args.json:
            path = Path(args.json)
            kept = json.loads(path.read_text()) if path.exists() else []
            kept = [r for r in kept if r["model"] != name] + [row]
            kept.sort(key=lambda r: list(SPECS).index(r["model"]) if r["model"] in SPECS else 999)
            path.write_text(json.dumps(kept, indent=1))
    print(markdown(rows))


if __name__ == "__main__":
    main()
