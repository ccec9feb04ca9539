"""nn.Module containers read through their tables: ``_parameters``/``_buffers``/``_modules``
entries as sources, and the stock Sequential/ModuleList/ModuleDict/ParameterList ``len``,
iteration and indexing. Below the semantics modules so that operations (``len``, ``iter``,
``[]`` of any value) and modules (attribute reads) both import it (issue 24: no cycle)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from symbolic_vm.class_dicts import MISSING, class_lookup
from symbolic_vm.errors import Unsupported
from symbolic_vm.guard_api import AttrSource, ItemSource, Source
from symbolic_vm.values import ConstVar, ModuleVar, Var

if TYPE_CHECKING:
    from symbolic_vm.output import Output

_MODULE_GETATTR = torch.nn.Module.__getattr__
_MODULE_SETATTR = torch.nn.Module.__setattr__
STATE_TABLES = ("_parameters", "_buffers", "_modules")


def tables_are_the_path(cls: type) -> bool:
    """True when, for instances of ``cls``, a name held in ``_parameters``/``_buffers``/
    ``_modules`` (and not a class attribute) is found there by ``getattr`` and nowhere else.

    Proof by the class: attribute lookup is object's (instance ``__dict__`` first, then
    ``nn.Module.__getattr__``, which reads the three tables in that order), and ``__setattr__``
    is ``nn.Module``'s, which removes a name from ``__dict__`` whenever it stores it in a table
    and refuses to shadow one (``register_*`` refuse an existing attribute). Only writes that
    bypass it (``object.__setattr__``, ``m.__dict__[name] = ...``) or a change of the instance's
    ``__class__`` could make ``__dict__`` shadow a table entry; neither is guarded.
    """
    return (
        getattr(cls, "__getattribute__", None) is object.__getattribute__
        and getattr(cls, "__getattr__", None) is _MODULE_GETATTR
        and getattr(cls, "__setattr__", None) is _MODULE_SETATTR
    )


def state_source(
    base: Source | None, module: torch.nn.Module, table: str, name: str
) -> Source | None:
    """The source of ``module.<name>`` held in ``module.<table>``: read through the table's dict
    (``base._parameters['weight']``) when the class proves ``getattr`` ends there (see
    :func:`tables_are_the_path`), else through ``getattr`` (``base.weight``)."""
    if base is None:
        return None
    cls = type(module)
    if (
        tables_are_the_path(cls)
        and name not in module.__dict__
        and class_lookup(cls, name) is MISSING
        and all(
            name not in module.__dict__.get(t, {})
            for t in STATE_TABLES[: STATE_TABLES.index(table)]
        )
    ):
        return ItemSource(AttrSource(base, table), name)
    return AttrSource(base, name)


def _submodule_key(module: torch.nn.Module, index: object) -> str | None:
    """The ``_modules`` key that ``module[index]`` reads, for the stock Sequential/ModuleList
    ``__getitem__`` with an int and ModuleDict's with a key (None otherwise)."""
    cls: Any = type(module)  # the container classes' __getitem__, compared by identity
    if cls.__getitem__ is torch.nn.ModuleDict.__getitem__:
        return index if isinstance(index, str) and index in module._modules else None
    if isinstance(index, bool) or not isinstance(index, int):
        return None
    keys = list(module._modules)
    if cls.__getitem__ is torch.nn.Sequential.__getitem__:
        return keys[index] if -len(keys) <= index < len(keys) else None
    if cls.__getitem__ is torch.nn.ModuleList.__getitem__:
        key = str(index if index >= 0 else index + len(keys))
        return key if key in module._modules else None
    return None


def _stock_parameter_list(module: torch.nn.Module) -> bool:
    cls: Any = type(module)
    return (
        isinstance(module, torch.nn.ParameterList)
        and cls.__getitem__ is torch.nn.ParameterList.__getitem__
        and cls.__iter__ is torch.nn.ParameterList.__iter__
        and cls.__len__ is torch.nn.ParameterList.__len__
        and tables_are_the_path(cls)
    )


def parameter_list_item(out: Output, obj: ModuleVar, index: int, item: object) -> Var:
    """``plist[index]`` of a stock ParameterList (``item`` is its real value).

    Its ``__getitem__`` checks the index against ``len`` (``_size``), then reads attribute
    ``str(index)``, which for a parameter is the ``_parameters`` entry (``tables_are_the_path``):
    read that way, the guards and the transformed code take it as a module parameter
    (MODULE_PARAMS, one params_reader) instead of calling ``__getitem__`` and its index check
    once each per call. ``_size`` is guarded (CONSTANT_MATCH): it moves negative indices and
    what iterating the list yields.
    """
    module = obj.module
    if obj.source is None:
        return out.wrap(item, None)
    size = len(module)
    key = str(index + size if index < 0 else index)
    if not _stock_parameter_list(module):
        return out.wrap(item, ItemSource(obj.source, index))
    out.request("CONSTANT_MATCH", AttrSource(obj.source, "_size"), size)
    if module._parameters.get(key) is not item:  # a non-tensor item: a plain attribute
        return out.wrap(item, ItemSource(obj.source, index))
    return out.wrap(item, ItemSource(AttrSource(obj.source, "_parameters"), key))


def submodule_item(out: Output, obj: ModuleVar, index: object, sub: object) -> Var:
    """``container[index]`` (``sub`` is its real value): read through ``_modules`` when the
    container's own ``__getitem__`` would read that entry, with a DICT_KEYS guard on
    ``_modules`` where the key depends on the position (Sequential, negative ModuleList
    indices), else through the subscript itself."""
    module = obj.module
    if obj.source is None:
        return out.wrap(sub, None)
    if isinstance(module, torch.nn.ParameterList) and type(index) is int:
        return parameter_list_item(out, obj, index, sub)
    key = _submodule_key(module, index)
    if key is None or module._modules.get(key) is not sub or not tables_are_the_path(type(module)):
        return out.wrap(sub, ItemSource(obj.source, index))
    modules_source = AttrSource(obj.source, "_modules")
    if isinstance(module, torch.nn.Sequential) or (isinstance(index, int) and index < 0):
        out.request("DICT_KEYS", modules_source, module._modules)
    return out.wrap(sub, ItemSource(modules_source, key))


_MODULES_LEN = (
    torch.nn.ModuleList.__len__, torch.nn.Sequential.__len__, torch.nn.ModuleDict.__len__
)


def has_stock_len(cls: type) -> bool:
    """Whether ``len()`` of a ``cls`` instance is a stock container's (``module_len``)."""
    return getattr(cls, "__len__", None) in _MODULES_LEN


def module_len(out: Output, obj: ModuleVar) -> int | None:
    """``len(container)`` of a ModuleList/Sequential/ModuleDict (their ``__len__`` is the size
    of ``_modules``, guarded by DICT_KEYS: appending a module recompiles); None for a module
    class with another ``__len__``."""
    module = obj.module
    if not has_stock_len(type(module)):
        return None
    if obj.source is not None:
        out.request("DICT_KEYS", AttrSource(obj.source, "_modules"), module._modules)
    return len(module._modules)


def container_modules(out: Output, obj: ModuleVar) -> list[Var]:
    """``list(container)`` for a Sequential/ModuleList: its ``_modules`` values in order, each
    read through ``_modules`` under a DICT_KEYS guard (a module added, removed or reordered
    later recompiles), or by position when the class iterates another way."""
    module = obj.module
    stock_iter = type(module).__iter__ in (
        torch.nn.Sequential.__iter__, torch.nn.ModuleList.__iter__
    )
    if obj.source is None or not stock_iter or not tables_are_the_path(type(module)):
        return [
            out.wrap(sub, ItemSource(obj.source, i) if obj.source is not None else None)
            for i, sub in enumerate(module)
        ]
    modules_source = AttrSource(obj.source, "_modules")
    out.request("DICT_KEYS", modules_source, module._modules)
    return [out.wrap(sub, ItemSource(modules_source, key)) for key, sub in module._modules.items()]


def iterate_module(out: Output, var: ModuleVar) -> list[Var]:
    """``list(module)`` for a stock Sequential, ModuleList, ModuleDict (its keys) or
    ParameterList; any other module raises Unsupported."""
    module = var.module
    out.depend(var)
    if isinstance(module, (torch.nn.Sequential, torch.nn.ModuleList)):
        return container_modules(out, var)
    if isinstance(module, torch.nn.ModuleDict):
        if var.source is not None:  # its keys are _modules' (a module added recompiles)
            out.request("DICT_KEYS", AttrSource(var.source, "_modules"), module._modules)
        return [ConstVar(k) for k in module]
    if isinstance(module, torch.nn.ParameterList):
        return [parameter_list_item(out, var, i, p) for i, p in enumerate(module)]
    raise Unsupported(f"iterating over module {type(module).__name__}")
