"""Import torchvision, timm and transformers on a CPU machine whose torchvision is a CUDA build.

The registry's torchvision wheels link against torch's CUDA libraries; on a CPU-only torch their C
extension (``torchvision/_C.so``) fails to load, which torchvision tolerates for most ops, but
its ``_meta_registrations`` then registers fake kernels for ``torchvision::nms`` and
``torchvision::qnms`` unconditionally, and ``import torchvision`` dies with "operator
torchvision::nms does not exist".

``import_torchvision()`` tries the extension first, exactly as torchvision will. Only when it does
not load does it define those two operators' schemas (with CPU/CUDA kernels that raise a clear
error), so the fake registrations succeed. Classification models (resnet, mobilenet, efficientnet,
convnext, every timm model) and transformers (whose modeling code imports torchvision) then work;
detection ops (``torchvision.ops.nms``, ``roi_align``, ...) raise torchvision's own "Couldn't load
custom C++ ops" error. Where the extension loads, this is a plain ``import torchvision``.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
from types import ModuleType
from typing import Any

import torch

__all__ = ["import_timm", "import_torchvision", "import_transformers", "torchvision_ops_loaded"]

# The schemas torchvision's _meta_registrations needs to exist before it registers fake kernels.
_SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
# The Library that owns our definitions: registrations are undone when it is collected.
_LIBRARY: list[torch.library.Library] = []
_OPS_LOADED: list[bool] = []


def _op_exists(name: str) -> bool:
    try:
        getattr(torch.ops.torchvision, name)
    except (AttributeError, RuntimeError):
        return False
    return True


def _extension_path(package_dir: str) -> str | None:
    """Where torchvision's ``_C`` extension is, found the way torchvision finds it."""
    loader = (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES)
    spec = importlib.machinery.FileFinder(package_dir, loader).find_spec("_C")
    return None if spec is None else spec.origin


def _load_extension(package_dir: str) -> bool:
    path = _extension_path(package_dir)
    if path is None:
        return False
    try:
        # Loading twice is harmless: torchvision's own load then finds the library already open.
        torch.ops.load_library(path)  # type: ignore[no-untyped-call]
    except (ImportError, OSError):
        return False
    return True


def _unavailable(name: str) -> Any:
    def kernel(*args: object, **kwargs: object) -> Any:
        raise RuntimeError(
            f"torchvision::{name} is unavailable: torchvision's C++ extension did not load "
            "(a CUDA build of torchvision on a CPU-only torch); install a torchvision wheel "
            "built for this torch to use detection ops."
        )

    return kernel


def _define_missing_schemas() -> None:
    library = torch.library.Library("torchvision", "FRAGMENT")  # type: ignore[no-untyped-call]
    for name, schema in _SCHEMAS.items():
        if _op_exists(name):
            continue
        library.define(schema)  # type: ignore[no-untyped-call]
        for key in ("CPU", "CUDA"):
            library.impl(name, _unavailable(name), key)  # type: ignore[no-untyped-call]
    _LIBRARY.append(library)


def import_torchvision() -> ModuleType:
    """Import and return torchvision, defining its missing op schemas first if its C ops don't load.

    Raises ImportError if torchvision is not installed.
    """
    if not _OPS_LOADED:
        spec = importlib.util.find_spec("torchvision")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("torchvision is not installed (pip install torchvision)")
        package_dir = os.fspath(next(iter(spec.submodule_search_locations)))
        loaded = _op_exists("nms") or _load_extension(package_dir)
        if not loaded:
            _define_missing_schemas()
        _OPS_LOADED.append(loaded)
    return importlib.import_module("torchvision")


def torchvision_ops_loaded() -> bool:
    """True if torchvision's C++ ops (nms, roi_align, ...) are really available."""
    import_torchvision()
    return _OPS_LOADED[0]


def import_timm() -> ModuleType:
    """Import and return timm, which imports torchvision (see ``import_torchvision``)."""
    import_torchvision()
    return importlib.import_module("timm")


def import_transformers() -> ModuleType:
    """Import and return transformers, whose modeling code imports torchvision when installed."""
    import_torchvision()
    return importlib.import_module("transformers")
