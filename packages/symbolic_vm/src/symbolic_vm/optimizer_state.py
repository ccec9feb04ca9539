"""torch.optim's state, as a traced optimizer step reads it.

An optimizer keeps its per-parameter state in ``opt.state``, a defaultdict keyed by the
parameters themselves, and fills it lazily in ``_init_group``. Two rules let ``opt.step()``
trace whole, as torch.compile's does:

- ``d[t]`` of a dict from the frame keyed by tensors, with ``t`` a tensor from the frame that
  is one of its keys: the value at ``ItemSource(d, SameObject(t))`` (the guard looks the key up
  by identity), with ``t``'s own source pinned by identity (ID_MATCH).
- ``opt._init_group(group, [], [], ...)``: run for real on the real param group and fresh
  lists (it creates missing state, as eager's first step does), and its lists filled with the
  tensors it appended, each tracked at its source (``group["params"][i]``, its ``.grad``,
  ``opt.state[p][name]``). Its code (loops over the state, ``len(state) == 0`` checks) is not
  traced; the trace relies on the group's options and on which parameters have gradients, and
  guards them.
"""

from __future__ import annotations

import inspect
import types
from typing import TYPE_CHECKING, Any

import torch

from symbolic_vm.guard_api import AttrSource, ItemSource, Source
from symbolic_vm.values import ConstVar, DictVar, ListVar, ObjectVar, TensorVar, Var

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter


class SameObject:
    """A dict key that finds exactly ``obj`` (equal only to it and to keys wrapping it; hashed
    as it): looks up a tensor key in a guard or in the transformed code without comparing
    tensors."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __hash__(self) -> int:
        return hash(self.obj)

    def __eq__(self, other: object) -> bool:
        return other is self.obj or (isinstance(other, SameObject) and other.obj is self.obj)

    def __repr__(self) -> str:
        # unique per object: graph inputs are named from their sources (two parameters of one
        # shape made two placeholders of one name: a SyntaxError in the graph's code)
        return f"<the {type(self.obj).__name__} at {id(self.obj):#x}>"


def tensor_keyed_item(vm: Interpreter, obj: Var, key: Var) -> Var | None:
    """``obj[key]`` for a dict from the frame and a tensor key from the frame that it holds;
    None otherwise (the caller's rules then apply)."""
    if not (
        isinstance(obj, ObjectVar)
        and isinstance(obj.value, dict)
        and obj.source is not None
        and isinstance(key, TensorVar)
        and key.source is not None
    ):
        return None
    out = vm.out
    try:
        real = out.input_value(key)
    except KeyError:  # not a graph input
        return None
    if not isinstance(real, torch.Tensor) or not _has_key(obj.value, real):
        return None
    out.request("ID_MATCH", key.source, real)
    return out.wrap(dict.__getitem__(obj.value, real), ItemSource(obj.source, SameObject(real)))


def _has_key(d: dict[Any, Any], key: torch.Tensor) -> bool:
    return any(k is key for k in d)


def init_group(
    vm: Interpreter, func: types.FunctionType, args: list[Var], kwargs: dict[str, Var]
) -> Var | None:
    """``opt._init_group(...)`` run for real (see the module docstring); None when its
    arguments are not a param group of ``opt`` and fresh lists (it is then traced)."""
    if func.__name__ != "_init_group" or not args:
        return None
    # once torch.compile has run in the process, every optimizer's _init_group is wrapped as
    # compiler-disabled (torch's own tracer runs it for real too): the function under the wrapper
    func = getattr(func, "_torchdynamo_orig_callable", func)
    if not isinstance(func, types.FunctionType):
        return None
    opt_var = args[0]
    if not (
        isinstance(opt_var, ObjectVar)
        and isinstance(opt_var.value, torch.optim.Optimizer)
        and opt_var.source is not None
    ):
        return None
    opt: torch.optim.Optimizer = opt_var.value
    if any(dict_id == id(opt.state) for dict_id, _ in vm.out.tensor_key_overlay):
        return None  # the trace stored into opt.state (tensor_key_stores): not there for real
    try:
        bound = inspect.signature(func).bind(*args, **kwargs)
    except TypeError:
        return None
    groups = AttrSource(opt_var.source, "param_groups")
    real_args: list[object] = []
    filled: list[tuple[ListVar, list[Any]]] = []
    group: tuple[Source, dict[str, Any], DictVar] | None = None
    for var in list(bound.arguments.values())[1:]:
        if isinstance(var, DictVar) and _is_group_of(opt, groups, var):
            assert isinstance(var.source, ItemSource) and isinstance(var.source.index, int)
            real_group = opt.param_groups[var.source.index]
            group = (var.source, real_group, var)
            real_args.append(real_group)
        elif isinstance(var, ListVar) and var.source is None and not var.box.items:
            fresh: list[Any] = []
            filled.append((var, fresh))
            real_args.append(fresh)
        elif isinstance(var, ConstVar):
            real_args.append(var.value)
        else:
            return None
    if group is None:
        return None
    group_source, real_group, group_var = group
    sources = _sources(opt, opt_var.source, group_source, real_group)
    with torch.no_grad():
        result = func(opt, *real_args)
    sources.update(_sources(opt, opt_var.source, group_source, real_group))
    out = vm.out
    for name, item in group_var.box.items.items():
        if name != "params" and isinstance(item, ConstVar):
            out.depend(item)  # the options it read (amsgrad, capturable, ...)
    for i, p in enumerate(real_group["params"]):
        p_source = ItemSource(ItemSource(group_source, "params"), i)
        out.request("ID_MATCH", p_source, p)  # the key of its state
        if p.grad is None:
            out.request("CONSTANT_MATCH", AttrSource(p_source, "grad"), None)
    for list_var, real_list in filled:
        for item in real_list:
            if isinstance(item, torch.Tensor):
                source = sources.get(id(item))
                if source is None:
                    return None
                list_var.box.items.append(out.wrap(item, source))
            elif item is None or isinstance(item, (bool, int, float)):
                list_var.box.items.append(ConstVar(item))
            else:
                return None
    return ConstVar(result)


def _is_group_of(opt: torch.optim.Optimizer, groups: Source, var: DictVar) -> bool:
    source = var.source
    if not (isinstance(source, ItemSource) and source.base_source == groups):
        return False
    index = source.index
    if not (isinstance(index, int) and 0 <= index < len(opt.param_groups)):
        return False
    # unchanged by the trace so far: the real group is what the trace holds
    return set(var.box.items) == set(opt.param_groups[index])


def _sources(
    opt: torch.optim.Optimizer, opt_source: Source, group_source: Source, group: dict[str, Any]
) -> dict[int, Source]:
    """Where each tensor ``_init_group`` may append lives: the group's parameters, their
    gradients and their state."""
    found: dict[int, Source] = {}
    state = AttrSource(opt_source, "state")
    for i, p in enumerate(group["params"]):
        p_source = ItemSource(ItemSource(group_source, "params"), i)
        found[id(p)] = p_source
        if p.grad is not None:
            found[id(p.grad)] = AttrSource(p_source, "grad")
        for name, value in opt.state.get(p, {}).items():
            if isinstance(value, torch.Tensor) and isinstance(name, str):
                found[id(value)] = ItemSource(ItemSource(state, SameObject(p)), name)
    return found
