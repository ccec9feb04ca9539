"""The names symbolic_vm uses from the guards package (its public API only)."""

from __future__ import annotations

from guards import (
    AttrSource,
    CallSource,
    GlobalSource,
    GuardSet,
    ItemSource,
    LocalSource,
    MethodCallSource,
    SizeSource,
    Source,
    UnsupportedGuardValue,
    params_reader,
    shape_guards,
)

__all__ = [
    "AttrSource",
    "CallSource",
    "GlobalSource",
    "GuardSet",
    "ItemSource",
    "LocalSource",
    "MethodCallSource",
    "SizeSource",
    "Source",
    "UnsupportedGuardValue",
    "params_reader",
    "shape_guards",
]
