"""Reading class dictionaries along the MRO without calling anything (no descriptor runs):
the facts attribute reads and stores both decide on."""

from __future__ import annotations

from typing import Any

__all__ = ["MISSING", "class_lookup", "has_instance_dict", "is_data_descriptor"]

MISSING = object()  # what class_lookup returns for a name no class defines


def class_lookup(cls: type, name: str) -> Any:
    """``name`` in the class dicts along ``cls``'s MRO (no descriptor called), or MISSING."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return MISSING


def is_data_descriptor(attr: object) -> bool:
    """Whether ``attr`` found on a class takes precedence over the instance dict."""
    kind = type(attr)
    return hasattr(kind, "__set__") or hasattr(kind, "__delete__")


def has_instance_dict(cls: type) -> bool:
    """Whether instances of ``cls`` have a ``__dict__`` (a class of ``__slots__`` only has
    none: storing any other name raises AttributeError)."""
    return cls.__dictoffset__ != 0
