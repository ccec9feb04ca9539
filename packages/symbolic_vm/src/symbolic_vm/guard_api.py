"""The names symbolic_vm uses from the guards package (its public API only)."""

from __future__ import annotations

from guards import (
    AttrSource,
    CallSource,
    ClassDictSource,
    DictCopySource,
    GlobalSource,
    GuardSet,
    InstanceAttrSource,
    ItemSource,
    LocalSource,
    MethodCallSource,
    SetItemsSource,
    SizeSource,
    Source,
    StrideSource,
    TypeSource,
    UnsupportedGuardValue,
    params_reader,
    shape_guards,
)

__all__ = [
    "AttrSource",
    "CallSource",
    "ClassDictSource",
    "DictCopySource",
    "GlobalSource",
    "InstanceAttrSource",
    "GuardSet",
    "ItemSource",
    "LocalSource",
    "MethodCallSource",
    "SetItemsSource",
    "SizeSource",
    "Source",
    "StrideSource",
    "TypeSource",
    "UnsupportedGuardValue",
    "params_reader",
    "shape_guards",
]
