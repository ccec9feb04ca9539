"""``del obj.attr`` / ``delattr`` and a Hugging Face style config's own ``__setattr__`` and
``__getattribute__`` inside compiled code (what T5's ``get_text_config(decoder=True)`` runs on
a deep copy of the config), compared with eager (results, the rebuilt object, the calls of the
class's hooks, the exception) and with torch.compile's graph count in the same test."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, ClassVar

import pytest
import torch
from object_model_harness import run_three_ways, same
from torch_reference import torch_reference

import compile_api

pytestmark = pytest.mark.usefixtures("errors_raise")


HOOKS: list[str] = []


@dataclasses.dataclass(repr=False)
class TextConfig:
    """PretrainedConfig in miniature: a dataclass whose own ``__setattr__`` and
    ``__getattribute__`` map names through ``attribute_map`` (and log each call)."""

    attribute_map: ClassVar[dict[str, str]] = {"num_hidden_layers": "num_layers"}
    num_layers: int = 2
    decoder_layers: int = 3
    decoder_ffn: int = 8
    d_model: int = 4
    is_encoder_decoder: bool = True

    def __setattr__(self, key: str, value: Any) -> None:
        HOOKS.append(f"set {key}")
        if key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        super().__setattr__(key, value)

    def __getattribute__(self, key: str) -> Any:
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def decoder_config(self) -> TextConfig:
        """configuration_utils.get_text_config(decoder=True) for a flat encoder-decoder config."""
        config = copy.deepcopy(self)
        for key in config.to_dict():
            if key.startswith("decoder"):
                new_key = "num_hidden_layers" if key == "decoder_layers" else key[len("decoder_"):]
                value = getattr(config, key)
                delattr(config, key)
                setattr(config, new_key, value)
        return config


CONFIG = TextConfig()


def _decoder_width(x: torch.Tensor, config: TextConfig) -> Any:
    dec = config.decoder_config()
    return (
        x * dec.num_hidden_layers + dec.ffn,
        dec.num_layers,
        hasattr(dec, "decoder_layers"),
        sorted(dec.to_dict()),
        config.num_layers,
        dec,
    )


def test_get_text_config_style_delattr_and_setattr_on_a_deep_copy_is_one_graph() -> None:
    HOOKS.clear()
    runs = run_three_ways(_decoder_width, lambda: (torch.ones(2), CONFIG))
    same(runs.ours[:5], runs.eager[:5])
    same(runs.theirs[:5], runs.eager[:5])
    got, want = runs.ours[5], runs.eager[5]
    assert type(got) is TextConfig and got.__dict__ == want.__dict__
    assert CONFIG == TextConfig()  # the original is left alone
    assert runs.our_graphs == runs.their_graphs == 1


def test_config_setattr_hook_runs_as_often_as_in_eager() -> None:
    HOOKS.clear()
    _decoder_width(torch.ones(2), CONFIG)
    want = list(HOOKS)
    compiled = compile_api.compile(_decoder_width, backend="eager")
    for _ in range(2):  # the trace, then a cached call: replayed both times
        HOOKS.clear()
        compiled(torch.ones(2), CONFIG)
        assert HOOKS == want == ["set num_hidden_layers", "set ffn"]


class Plain:
    def __init__(self, x: torch.Tensor) -> None:
        self.a = x
        self.b = 2


def _del_statement(x: torch.Tensor) -> Any:
    obj = Plain(x + 1)
    del obj.b
    try:
        del obj.b
    except AttributeError as error:
        message = str(error)
    obj.c = obj.a * 3
    return obj.c, hasattr(obj, "b"), message, obj


def test_del_statement_on_an_object_made_inside_matches_eager_including_the_error() -> None:
    runs = run_three_ways(_del_statement, lambda: (torch.ones(2),))
    same(runs.ours[:3], runs.eager[:3])
    assert runs.ours[2] == "'Plain' object has no attribute 'b'"
    assert sorted(vars(runs.ours[3])) == ["a", "c"]
    # torch.compile 2.13 runs this frame eagerly (0 graphs: it gives up on the caught
    # AttributeError of the second del); we capture all of it.
    assert runs.our_graphs == 1 and runs.their_graphs <= 1


DELETED: list[str] = []


class Guarded:
    def __init__(self) -> None:
        self.keep = 1
        self.drop = 2

    def __delattr__(self, name: str) -> None:
        DELETED.append(name)
        if name == "keep":
            return  # refused silently
        super().__delattr__(name)


class WithDeleter:
    def __init__(self) -> None:
        self._v = 5

    @property
    def v(self) -> int:
        return self._v

    @v.deleter
    def v(self) -> None:
        DELETED.append("v")
        self._v = 0


def _user_delattr(x: torch.Tensor) -> Any:
    g = Guarded()
    del g.keep
    delattr(g, "drop")
    w = WithDeleter()
    del w.v
    return x + g.keep + w.v, hasattr(g, "drop"), sorted(vars(g))


def test_user_delattr_and_property_deleter_are_traced_as_calls() -> None:
    DELETED.clear()
    runs = run_three_ways(_user_delattr, lambda: (torch.ones(2),))
    same(runs.ours, runs.eager)
    assert DELETED == ["keep", "drop", "v"] * 3  # eager, ours, torch: once per run each
    assert runs.our_graphs <= max(runs.their_graphs, 1)  # torch 2.11: 0 graphs, eager


class Holder:
    scale = 10.0  # a class attribute the instance's own attribute shadows


def _drop_scale(x: torch.Tensor, h: Holder) -> Any:
    before = h.scale
    del h.scale
    after = h.scale  # the class's, once the instance's is gone
    h.tmp = x * 2
    y = h.tmp + before
    delattr(h, "tmp")
    return y * after, hasattr(h, "tmp"), sorted(vars(h))


def _holder(own: bool) -> Holder:
    h = Holder()
    if own:
        h.scale = 2.0
    h.keep = 1
    return h


def test_delattr_on_a_frame_object_is_replayed_after_one_graph() -> None:
    x = torch.randn(3)
    runs = run_three_ways(lambda x, h: _drop_scale(x, h), lambda: (x.clone(), _holder(True)))
    same(runs.ours, runs.eager)
    assert sorted(vars(runs.our_args[1])) == sorted(vars(runs.eager_args[1])) == ["keep"]
    assert runs.our_graphs == 1
    with torch_reference():
        assert runs.our_graphs <= runs.their_graphs


def test_delattr_on_a_frame_object_guards_that_the_attribute_is_there() -> None:
    compiled = compile_api.compile(_drop_scale)
    x = torch.randn(3)
    same(compiled(x, _holder(True)), _drop_scale(x, _holder(True)))
    # the same call on an object without its own ``scale``: eager raises, so must we
    with pytest.raises(AttributeError, match="scale") as ours:
        compiled(x, _holder(False))
    with pytest.raises(AttributeError) as eager:
        _drop_scale(x, _holder(False))
    assert str(ours.value) == str(eager.value)
