"""``torch.utils._pytree``'s flatten, unflatten and map on traced containers, answered by the VM
(registered in builtin_table's ``@implements`` table; symbolic_vm.calls imports this module),
and ``flatten`` for the VM's own calls (a ``torch.func`` transform applied to tuples).

Traced line by line, ``tree_flatten`` makes a ``TreeSpec`` (a torch dataclass the trace does not
create); torch's own higher-order functions flatten their arguments with it (``associative_scan``
in transformers' Mamba). Here the structure of plain tuples, lists and dicts is read off
the traced value, the real ``TreeSpec`` is computed on a stand-in whose leaves are markers, and
the spec is a constant of the trace; unflatten rebuilds tracked containers around the leaves.
Leaves must be tensors, symbolic numbers or constants pytree takes for leaves; anything else
(named tuples, user objects of registered classes) or an ``is_leaf`` argument is refused, a
graph break, as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch.utils._pytree as pytree

from symbolic_vm import operations as ops
from symbolic_vm.builtin_table import implements
from symbolic_vm.errors import Unsupported
from symbolic_vm.values import (
    ConstVar,
    DictBox,
    DictVar,
    ListBox,
    ListVar,
    SymVar,
    TensorVar,
    TupleVar,
    Var,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter


class _Leaf:
    """A marker standing for the traced leaf at ``index`` (a type pytree knows as a leaf)."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


def _stand_in(var: Var, leaves: list[Var]) -> object:
    """The real container structure of ``var`` with markers for its leaves (appended)."""
    if isinstance(var, TupleVar) and var.named_type is None and not var.fields and not var.is_size:
        return tuple(_stand_in(v, leaves) for v in var.items)
    if isinstance(var, ListVar):
        return [_stand_in(v, leaves) for v in var.box.items]
    if isinstance(var, DictVar):
        return {k: _stand_in(v, leaves) for k, v in var.box.items.items()}
    if not (
        isinstance(var, (TensorVar, SymVar))
        or (isinstance(var, ConstVar) and pytree.tree_is_leaf(var.value))
    ):
        # a named tuple, a user object of a registered class, a value the VM holds otherwise:
        # pytree may take it for a node, which would be a wrong tree here
        raise Unsupported(f"pytree of a {type(var).__name__} is not traced")
    leaves.append(var)  # None too: a leaf of torch's Python pytree
    return _Leaf(len(leaves) - 1)


def _rebuild(value: object, leaves: list[Var]) -> Var:
    if isinstance(value, _Leaf):
        return leaves[value.index]
    if type(value) is tuple:
        return TupleVar(tuple(_rebuild(v, leaves) for v in value))
    if type(value) is list:
        return ListVar(ListBox([_rebuild(v, leaves) for v in value]))
    if type(value) is dict:
        return DictVar(DictBox({k: _rebuild(v, leaves) for k, v in value.items()}))
    if value is None:
        return ConstVar(None)
    raise Unsupported(f"pytree unflatten to a {type(value).__name__} node is not traced")


def flatten(tree: Var) -> tuple[list[Var], Any]:
    """The leaves of a traced tree and its real ``TreeSpec`` (Unsupported for node types the VM
    does not model)."""
    leaves: list[Var] = []
    markers, spec = pytree.tree_flatten(_stand_in(tree, leaves))
    if not all(isinstance(m, _Leaf) for m in markers):
        raise Unsupported("pytree flatten of a structure the VM does not model")
    return [leaves[m.index] for m in markers], spec


def _no_is_leaf(kwargs: dict[str, Var], what: str) -> None:
    extra = {k: v for k, v in kwargs.items() if not (k == "is_leaf" and _is_none(v))}
    if extra:
        raise Unsupported(f"pytree.{what} with {sorted(extra)} is not traced")


def _is_none(var: Var) -> bool:
    return isinstance(var, ConstVar) and var.value is None


@implements(pytree.tree_flatten)
def _tree_flatten(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if len(args) == 2 and _is_none(args[1]):
        args = args[:1]
    _no_is_leaf(kwargs, "tree_flatten")
    if len(args) != 1:
        raise Unsupported("pytree.tree_flatten with an is_leaf function is not traced")
    leaves, spec = flatten(args[0])
    return TupleVar((ListVar(ListBox(leaves)), ConstVar(spec)))


@implements(pytree.tree_leaves)
def _tree_leaves(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    _no_is_leaf(kwargs, "tree_leaves")
    if len(args) != 1:
        raise Unsupported("pytree.tree_leaves with an is_leaf function is not traced")
    return ListVar(ListBox(flatten(args[0])[0]))


def _unflatten(vm: Interpreter, leaves_var: Var, spec_var: Var) -> Var:
    spec = ops.const_value(vm.out, spec_var)
    if not isinstance(spec, pytree.TreeSpec):
        raise Unsupported("pytree.tree_unflatten with a spec made outside the trace")
    if isinstance(leaves_var, ListVar):
        leaves = list(leaves_var.box.items)
    elif isinstance(leaves_var, TupleVar):
        leaves = list(leaves_var.items)
    else:
        raise Unsupported("pytree.tree_unflatten of leaves that are not a list or tuple")
    if len(leaves) != spec.num_leaves:
        raise Unsupported("pytree.tree_unflatten with the wrong number of leaves")
    return _rebuild(pytree.tree_unflatten([_Leaf(i) for i in range(len(leaves))], spec), leaves)


@implements(pytree.tree_unflatten)
def _tree_unflatten(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    named = dict(zip(("leaves", "treespec"), args, strict=False)) | kwargs
    if set(named) != {"leaves", "treespec"} or len(args) > 2:
        raise Unsupported("pytree.tree_unflatten with these arguments is not traced")
    return _unflatten(vm, named["leaves"], named["treespec"])


@implements(pytree.tree_map)
def _tree_map(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    _no_is_leaf(kwargs, "tree_map")
    if len(args) < 2:
        raise Unsupported("pytree.tree_map without a tree")
    func, tree, *rests = args
    leaves, spec = flatten(tree)
    others = []
    for rest in rests:
        rest_leaves, rest_spec = flatten(rest)
        if rest_spec != spec:
            raise Unsupported("pytree.tree_map over trees of different structures")
        others.append(rest_leaves)
    results = [vm.call(func, [leaf, *(o[i] for o in others)], {}) for i, leaf in enumerate(leaves)]
    return _rebuild(pytree.tree_unflatten([_Leaf(i) for i in range(len(results))], spec), results)
