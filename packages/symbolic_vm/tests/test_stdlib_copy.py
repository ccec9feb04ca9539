"""``copy.copy``/``copy.deepcopy`` inside compiled code (symbolic_vm.stdlib.copy_): traced
containers and config-like objects from outside the frame, compared with eager (results, the
original left alone, user ``__getattribute__`` calls) and with torch.compile's graph count."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from object_model_harness import run_three_ways, same

import compile_api

pytestmark = pytest.mark.usefixtures("errors_raise")


LOOKUPS: list[str] = []


class Config:
    """A Hugging Face style config: its own __getattribute__ maps aliases (and logs)."""

    attribute_map = {"hidden": "d_model"}

    def __init__(self) -> None:
        self.d_model = 4
        self.layers = [1, 2]
        self.names = {"a": "b"}
        self.is_decoder = False

    def __getattribute__(self, key: str) -> Any:
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


class LoggedConfig(Config):
    """The same, logging each lookup (torch.compile 2.13 fails its own guard on this log)."""

    def __getattribute__(self, key: str) -> Any:
        LOOKUPS.append(key)
        return super().__getattribute__(key)


CONFIG = Config()
LOGGED = LoggedConfig()


def _decoder_config(x: torch.Tensor, config: Config) -> Any:
    cfg = copy.deepcopy(config)
    cfg.is_decoder = True
    cfg.layers.append(3)
    return x * cfg.hidden + len(cfg.layers), cfg.is_decoder, config.is_decoder, config.layers


def test_deepcopy_of_a_config_from_outside_matches_eager_in_one_graph() -> None:
    runs = run_three_ways(_decoder_config, lambda: (torch.ones(2), CONFIG))
    same(runs.ours, runs.eager)
    same(runs.theirs, runs.eager)
    assert CONFIG.layers == [1, 2] and CONFIG.is_decoder is False
    assert runs.our_graphs <= runs.their_graphs == 1


def test_deepcopy_runs_the_classs_getattribute_as_often_as_eager() -> None:
    LOOKUPS.clear()
    eager = _decoder_config(torch.ones(2), LOGGED)
    want = list(LOOKUPS)
    LOOKUPS.clear()
    compiled = compile_api.compile(_decoder_config, backend="eager")
    same(compiled(torch.ones(2), LOGGED), eager)
    # The traced hook calls are replayed (their appends) after the graph, in eager's order.
    # Before them come the VM's own isinstance checks on the real object while tracing, which
    # read __class__/__dict__ through the hook (a known issue of the tracer, not of copy).
    assert LOOKUPS[-len(want):] == want
    assert set(LOOKUPS[: -len(want)]) <= {"__class__", "__dict__"}
    assert LOGGED.layers == [1, 2]


def test_deepcopy_returned_from_the_frame_is_a_new_equal_object() -> None:
    def f(x: torch.Tensor) -> Any:
        return copy.deepcopy(CONFIG), x + 1

    runs = run_three_ways(f, lambda: (torch.ones(2),))
    cfg, _ = runs.ours
    assert type(cfg) is Config and cfg is not CONFIG
    assert vars(cfg) == vars(CONFIG) and cfg.layers is not CONFIG.layers
    assert runs.our_graphs <= runs.their_graphs


def test_a_config_changed_between_calls_is_copied_afresh() -> None:
    cfg = Config()

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * copy.deepcopy(cfg).d_model

    compiled = compile_api.compile(f, backend="eager")
    assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 4.0))
    cfg.d_model = 7
    assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 7.0))


def _containers(x: torch.Tensor, outer: dict[str, Any]) -> Any:
    inner = [x * 2, {"k": [1, 2]}]
    pair = (inner, inner)
    deep = copy.deepcopy(pair)
    deep[0][1]["k"].append(3)
    shallow = copy.copy(outer)
    shallow["new"] = 1
    shallow["list"].append(5)
    outer_deep = copy.deepcopy(outer)
    outer_deep["list"].append(6)
    return deep, deep[0] is deep[1], inner, shallow, outer_deep, copy.copy(inner) is inner


def test_deepcopy_and_copy_of_traced_containers_match_eager() -> None:
    runs = run_three_ways(_containers, lambda: (torch.ones(3), {"list": [1], "n": 2}))
    same(runs.ours, runs.eager)
    same(runs.theirs, runs.eager)
    same(runs.our_args[1], runs.eager_args[1])  # the shallow copy's list is the caller's
    assert runs.our_graphs <= runs.their_graphs


def test_deepcopy_of_a_tensor_made_in_the_graph_is_a_clone() -> None:
    def f(x: torch.Tensor) -> Any:
        y = x + 1
        z = copy.deepcopy(y)
        z.mul_(2)
        return y, z

    runs = run_three_ways(f, lambda: (torch.ones(3),))
    same(runs.ours, runs.eager)
    assert runs.our_graphs <= runs.their_graphs


class WithOwnDeepcopy:
    def __init__(self) -> None:
        self.calls = 0

    def __deepcopy__(self, memo: dict[int, Any]) -> WithOwnDeepcopy:
        self.calls += 1
        return WithOwnDeepcopy()


def test_a_class_with_its_own_deepcopy_runs_it_as_eager() -> None:
    obj = WithOwnDeepcopy()

    def f(x: torch.Tensor) -> Any:
        return type(copy.deepcopy(obj)).__name__, x + 1

    compiled = compile_api.compile(f, backend="eager")
    got = compiled(torch.ones(2))
    assert got[0] == "WithOwnDeepcopy" and obj.calls == 1


class Layer:
    """A class whose __deepcopy__ copies its parts through the memo it is given (aliases of
    one list stay one list in the copy) and counts its calls."""

    copies = 0

    def __init__(self, weight: torch.Tensor, tags: list[str]) -> None:
        self.weight = weight
        self.tags = tags
        self.same_tags = tags

    def __deepcopy__(self, memo: dict[int, Any]) -> Layer:
        type(self).copies += 1
        new = Layer(self.weight * 1, copy.deepcopy(self.tags, memo))
        new.same_tags = copy.deepcopy(self.same_tags, memo)
        return new


class Shallow:
    def __init__(self, items: list[int]) -> None:
        self.items = items

    def __copy__(self) -> Shallow:
        type(self).copies = getattr(type(self), "copies", 0) + 1
        return Shallow(list(self.items))


def _own_copies(x: torch.Tensor, outside: Layer) -> Any:
    made = Layer(x + 1, ["a"])
    pair = copy.deepcopy([made, made, outside])  # made copied once: the memo
    pair[0].tags.append("b")
    s = Shallow([1, 2])
    s2 = copy.copy(s)
    s2.items.append(3)
    return (
        pair[0] is pair[1], pair[0].tags, pair[0].same_tags is pair[0].tags, made.tags,
        pair[0].weight + pair[2].weight, pair[2].tags, outside.tags, s.items, s2.items,
    )


def test_user_deepcopy_and_copy_hooks_are_traced_with_the_calls_memo() -> None:
    def make() -> tuple[Any, ...]:
        return torch.arange(3.0), Layer(torch.ones(3), ["out"])

    Layer.copies = 0
    runs = run_three_ways(_own_copies, make)
    same(runs.ours, runs.eager)
    same(runs.theirs, runs.eager)
    assert runs.ours[0] is True and runs.ours[2] is True
    assert Layer.copies == 6  # two per run (made once, outside once): eager, ours, torch
    assert runs.our_graphs == 1 and runs.our_graphs <= runs.their_graphs
