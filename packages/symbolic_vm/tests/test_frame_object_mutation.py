"""Objects that exist outside the compiled frame, changed inside it: a store through the class's
own ``__setattr__`` is traced as a call (its effects replayed, the final store replayed as
``object.__setattr__`` so the hook does not run twice), and the items of a user dict/OrderedDict
subclass instance are read through ``dict.copy`` and written back through the C base's methods
(``output.DictSubclassWrite``). A list or dict from the frame that the trace changes is guarded
by its contents at entry (it used to recompile on every call).

Each case is run eagerly, under compile_api.compile and under torch.compile on fresh arguments,
twice: results, the hooks' logs and the objects' state after the calls equal eager's, and we
capture in no more graphs than torch.compile.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import pytest
import torch
from object_model_harness import run_three_ways, same

pytestmark = pytest.mark.usefixtures("errors_raise")


def _state(obj: Any) -> Any:
    """What a side effect can change: the items of a dict, then the instance dict."""
    items = list(dict.items(obj)) if isinstance(obj, dict) else None
    return type(obj), items, dict(getattr(obj, "__dict__", {}))


def _same_state(got: Any, want: Any) -> None:
    got_type, got_items, got_attrs = _state(got)
    want_type, want_items, want_attrs = _state(want)
    assert got_type is want_type
    if want_items is not None:
        assert got_items is not None
        assert [k for k, _ in got_items] == [k for k, _ in want_items]
        for (_, g), (_, w) in zip(got_items, want_items, strict=True):
            same(g, w)
    assert list(got_attrs) == list(want_attrs)
    for key, value in want_attrs.items():
        same(got_attrs[key], value)


# -- a user __setattr__ on an object from the frame ---------------------------------------------


class Recorded:
    """Logs each store in its own list, then stores through object.__setattr__."""

    def __init__(self) -> None:
        object.__setattr__(self, "log", [])

    def __setattr__(self, name: str, value: Any) -> None:
        self.log.append(name)
        super().__setattr__(name, value)


class Doubling:
    """Stores twice the value straight into the instance dict."""

    def __setattr__(self, name: str, value: Any) -> None:
        self.__dict__[name] = value * 2


def store_through_setattr(x: torch.Tensor, rec: Recorded, dbl: Doubling) -> torch.Tensor:
    rec.scale = 3.0
    rec.count = getattr(rec, "count", 0) + 1
    dbl.w = x.sum()
    return x * rec.scale + dbl.w


def test_setattr_override_on_a_frame_object_runs_once_per_store_and_replays() -> None:
    runs = run_three_ways(
        store_through_setattr, lambda: (torch.ones(2), Recorded(), Doubling()), calls=2,
        fresh=True,
    )
    same(runs.ours, runs.eager)
    for got, want in zip(runs.our_args[1:], runs.eager_args[1:], strict=True):
        _same_state(got, want)
    assert runs.our_args[1].log == ["scale", "count"]  # the hook ran once per store
    assert runs.our_graphs == 1 <= runs.their_graphs


# -- dict subclasses from the frame -----------------------------------------------------------


LOG: list[str] = []


class Logged(dict):  # type: ignore[type-arg]
    def __setitem__(self, key: str, value: Any) -> None:
        LOG.append(key)
        super().__setitem__(key, value)


class Ordered(collections.OrderedDict):  # type: ignore[type-arg]
    pass


def mutate_dict_subclasses(x: torch.Tensor, logged: Logged, ordered: Ordered) -> torch.Tensor:
    logged["a"] = x.sum()
    ordered["z"] = 1
    ordered["b"] = 2.0
    del ordered["z"]
    return x + logged["a"] + ordered["b"] + len(ordered) + ("z" in ordered)


def test_items_of_frame_dict_subclasses_change_as_in_eager() -> None:
    LOG.clear()
    runs = run_three_ways(
        mutate_dict_subclasses, lambda: (torch.ones(2), Logged(k=1), Ordered(q=0)), calls=2,
        fresh=True,
    )
    same(runs.ours, runs.eager)
    for got, want in zip(runs.our_args[1:], runs.eager_args[1:], strict=True):
        _same_state(got, want)
    assert LOG == ["a"] * 6  # eager, ours and torch.compile each ran __setitem__ twice
    # LOG's length is guarded (it grew): the second call recompiles, in torch.compile too.
    assert runs.our_graphs <= runs.their_graphs


class Output(collections.OrderedDict):  # type: ignore[type-arg]
    """transformers' ModelOutput in miniature: items and attributes kept in step."""

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.keys() and value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)


@dataclasses.dataclass
class LayerOutput(Output):
    hidden: torch.Tensor | None = None


def update_output(x: torch.Tensor, out: LayerOutput) -> torch.Tensor:
    out["hidden"] = x * 2
    out.extra = x + 1  # type: ignore[attr-defined]
    return out.hidden + out["hidden"]


def test_a_model_output_from_the_frame_updated_by_item_and_attribute() -> None:
    def make() -> tuple[Any, ...]:
        out = LayerOutput()
        out["hidden"] = torch.zeros(2)
        return torch.ones(2), out

    runs = run_three_ways(update_output, make, calls=2, fresh=True)
    same(runs.ours, runs.eager)
    _same_state(runs.our_args[1], runs.eager_args[1])
    assert runs.our_graphs == 1 <= runs.their_graphs


# -- guards of changed frame containers ---------------------------------------------------------


def grow(x: torch.Tensor, d: dict[str, float], xs: list[float]) -> torch.Tensor:
    d["b"] = 2.0
    xs.append(1.0)
    return x + len(d) + len(xs)


def test_a_changed_frame_dict_or_list_is_guarded_by_its_contents_at_entry() -> None:
    runs = run_three_ways(grow, lambda: (torch.ones(2), {"a": 1.0}, [0.0]), calls=3, fresh=True)
    same(runs.ours, runs.eager)
    assert runs.our_args[1:] == runs.eager_args[1:]
    assert runs.our_graphs == 1 <= runs.their_graphs
