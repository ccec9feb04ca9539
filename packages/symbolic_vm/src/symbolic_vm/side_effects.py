"""The side-effect log's records: what the transformed code replays after the graph runs
(attribute, global, container and cell writes, hook registrations, deferred logging calls), in
trace order."""

from __future__ import annotations

from typing import Any

import attrs

from symbolic_vm.guard_api import Source
from symbolic_vm.values import Var


@attrs.frozen
class AttrWrite:
    """``setattr(target, name, value)`` to replay after the graph runs; ``raw``: as
    ``object.__setattr__`` (the class's own ``__setattr__`` ran in the trace already)."""

    target: Var
    name: str
    value: Var
    raw: bool = False


@attrs.frozen
class AttrDelete:
    """``delattr(target, name)`` to replay after the graph runs (the class's ``__delattr__``
    is object's: attr_stores refuses any other)."""

    target: Var
    name: str


@attrs.frozen
class GlobalWrite:
    """Rebinding global ``name`` to ``value``."""

    name: str
    value: Var


@attrs.frozen
class ContainerWrite:
    """A list or dict from the frame whose contents changed: replay its final contents."""

    target: Var


@attrs.frozen
class CellWrite:
    """Assigning ``nonlocal name`` of the compiled frame (its closure cell)."""

    name: str
    value: Var


@attrs.frozen
class DictSubclassWrite:
    """A dict/OrderedDict subclass instance from the frame whose items changed (``target``: its
    items as a DictVar at ``DictCopySource(obj)``): replayed through the C base's own methods
    (``replace_dict_items``), so the class's Python ``__setitem__`` does not run again."""

    target: Var


def advanced_iterator(seq: list[Any], index: int) -> Any:
    """``iter(seq)`` advanced past ``index`` items: a list iterator leaving the compiled frame
    (it reads the list as it goes, as the frame's own iterator did)."""
    it = iter(seq)
    for _ in range(index):
        next(it)
    return it


def make_based_object(cls: type, base: Any, attributes: dict[str, Any]) -> Any:
    """Rebuild an instance of a user subclass of tuple/set/frozenset made while tracing: made
    from the value it is through its C base (the class's own ``__new__``/``__init__`` already
    ran symbolically), then its attributes."""
    if issubclass(cls, set):
        made: Any = set.__new__(cls)
        set.__init__(made, base)
    else:
        kind: Any = frozenset if issubclass(cls, frozenset) else tuple
        made = kind.__new__(cls, base)
    for name, value in attributes.items():
        object.__setattr__(made, name, value)
    return made


def replace_dict_items(obj: dict[Any, Any], items: dict[Any, Any]) -> None:
    """Make ``obj``'s items ``items`` (in order) through its C base class, running no override."""
    base: Any = next(k for k in type(obj).__mro__ if not k.__flags__ & _HEAPTYPE)
    base.clear(obj)
    for key, value in items.items():
        base.__setitem__(obj, key, value)


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: set on classes made by a class statement


@attrs.frozen
class HookRegistration:
    """``tensor.register_hook(hook)`` on a frame input, replayed after the graph runs (where
    torch.compile registers hooks on inputs too); ``hook`` has a source, read at each call."""

    tensor: Var
    hook: Var


@attrs.frozen
class DeferredCall:
    """``receiver.name(*args)`` made after the graph runs: a library's logging helper
    (logging_calls) on the logger read again at ``receiver``; the arguments are constants."""

    receiver: Source
    name: str
    args: tuple[Var, ...]


SideEffect = (
    AttrWrite | AttrDelete | GlobalWrite | ContainerWrite | CellWrite | DictSubclassWrite
    | HookRegistration | DeferredCall
)
