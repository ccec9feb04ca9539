"""``d[t] = v`` into a dict from the frame keyed by tensors, with ``t`` a tensor (issue #19/#20).

The dict (one that already holds keys other than constants: an optimizer's state, a cache
keyed by parameters) is not modelled item by item; reading it is a graph break except for
``d[t]`` (optimizer_state). A store is traced as torch.compile's is:

- the key is a tensor from the frame that is a graph input (an argument, a parameter, a
  global: pinned by identity, ID_MATCH, as the read pins it), or a tensor made in the trace
  (a graph output);
- the store is replayed after the graph, ``d.__setitem__(t, v)`` with ``d`` read again at its
  source and ``t`` read at its own source (or taken from the graph's outputs), in program
  order with the trace's other side effects (``DeferredCall``);
- later ``d[t]`` and ``t in d`` of a key stored by the trace see the stored value (True) from
  ``Output.tensor_key_overlay``; everything else reading the dict still breaks the graph (its
  length, its keys: the trace does not know what the real dict holds).

A dict of constant keys (``{}``, ``{"a": ...}``) is a DictVar, whose keys must stay constants:
a tensor-keyed store into it still breaks the graph.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from symbolic_vm.side_effects import DeferredCall
from symbolic_vm.values import ConstVar, ObjectVar, TensorVar, Var

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter


def _overlay_key(vm: Interpreter, obj: Var, key: Var) -> tuple[int, int, object] | None:
    """(id of the dict, id of the key, what the id is of) for a frame dict and a tensor key the
    overlay can name; None when the rules here do not apply."""
    if not (
        isinstance(obj, ObjectVar)
        and isinstance(obj.value, dict)
        and type(obj.value).__setitem__ is dict.__setitem__
        and obj.source is not None
        and isinstance(key, TensorVar)
    ):
        return None
    if key.source is None:  # made in the trace: this Var is the tensor
        return id(obj.value), id(key), key
    try:
        real = vm.out.input_value(key)
    except KeyError:  # not a graph input
        return None
    return id(obj.value), id(real), real


def store(vm: Interpreter, obj: Var, key: Var, value: Var) -> bool:
    """``obj[key] = value`` traced as the module docstring says (False: the rules do not
    apply; the caller's then do)."""
    found = _overlay_key(vm, obj, key)
    if found is None:
        return False
    dict_id, key_id, anchor = found
    out = vm.out
    assert obj.source is not None
    if key.source is not None:
        out.request("ID_MATCH", key.source, anchor)
    out.tensor_key_overlay[dict_id, key_id] = (anchor, value)
    out.side_effects.append(DeferredCall(obj.source, "__setitem__", (key, value)))
    return True


def stored_item(vm: Interpreter, obj: Var, key: Var) -> Var | None:
    """``obj[key]`` of a key this trace stored (None otherwise)."""
    found = _overlay_key(vm, obj, key)
    entry = vm.out.tensor_key_overlay.get(found[:2]) if found is not None else None
    return entry[1] if entry is not None else None


def stored_contains(vm: Interpreter, obj: Var, key: Var) -> Var | None:
    """``key in obj``: True for a key this trace stored (None otherwise: the caller's rules)."""
    return ConstVar(True) if stored_item(vm, obj, key) is not None else None
