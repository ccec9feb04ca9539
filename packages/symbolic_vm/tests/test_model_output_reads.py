"""Reading a transformers-style ``ModelOutput`` (a dataclass that subclasses OrderedDict, with
its own ``__post_init__``/``__setattr__``/``__setitem__``/``__getitem__``) inside compiled code:
``keys()``/``items()``/``values()``, ``to_tuple()``, ``out["name"]``, ``out[0]``/``out[-1]``/
``out[1:]``, iteration, ``in``, ``len``, ``get``, ``dict(out)``; on an output made in the frame,
one passed in, and one returned by a submodule. Compared with eager (results, the rebuilt
output, hook calls) and with torch.compile's graph count in the same test."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import pytest
import torch
from object_model_harness import run_three_ways, same

import compile_api

pytestmark = pytest.mark.usefixtures("errors_raise")


HOOKS: collections.Counter[str] = collections.Counter()


class Output(collections.OrderedDict):  # type: ignore[type-arg]
    """ModelOutput's behaviour, written afresh: the fields that are not None are its items."""

    def __post_init__(self) -> None:
        HOOKS["post_init"] += 1
        for field in dataclasses.fields(self):  # type: ignore[arg-type]
            value = self.__dict__.get(field.name)
            if value is not None:
                self[field.name] = value

    def __setattr__(self, name: str, value: Any) -> None:
        HOOKS["setattr"] += 1
        if name in {f.name for f in dataclasses.fields(self)} and value is not None:  # type: ignore[arg-type]
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __setitem__(self, key: str, value: Any) -> None:
        HOOKS["setitem"] += 1
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, str):
            return dict(self.items())[k]
        return self.to_tuple()[k]

    def to_tuple(self) -> tuple[Any, ...]:
        return tuple(self[k] for k in self.keys())


@dataclasses.dataclass
class SeqOutput(Output):
    last_hidden_state: torch.Tensor | None = None
    past: tuple[torch.Tensor, ...] | None = None
    attentions: torch.Tensor | None = None
    hidden_states: torch.Tensor | None = None


def _reads(out: SeqOutput) -> Any:
    keys = list(out.keys())
    total = sum(v.sum() for v in out.values() if isinstance(v, torch.Tensor))
    named = {k: type(v).__name__ for k, v in out.items()}
    return (
        keys, total, named, out.to_tuple()[0], out[0], out[-1], out["last_hidden_state"],
        out[1:], [k for k in out], "attentions" in out, "past" in out, len(out),
        out.get("attentions"), out.get("missing", 7), sorted(dict(out)),
    )


def _made_inside(x: torch.Tensor) -> Any:
    out = SeqOutput(last_hidden_state=x * 2, attentions=x + 1)
    return (*_reads(out), out)


def test_reads_of_an_output_made_in_the_frame_match_eager_in_one_graph() -> None:
    HOOKS.clear()
    runs = run_three_ways(_made_inside, lambda: (torch.arange(3.0),))
    eager_hooks = dict(HOOKS)
    same(runs.ours[:-1], runs.eager[:-1])
    got, want = runs.ours[-1], runs.eager[-1]
    assert type(got) is SeqOutput and list(got.keys()) == list(want.keys())
    same(dict(got), dict(want))
    same(got.to_tuple(), want.to_tuple())
    assert got.past is None and got.hidden_states is None
    assert runs.our_graphs == runs.their_graphs == 1
    HOOKS.clear()
    compile_api.reset()
    compile_api.compile(_made_inside)(torch.arange(3.0))
    assert dict(HOOKS) == {k: v // 3 for k, v in eager_hooks.items()}  # as one eager run


def _passed_in(x: torch.Tensor, out: SeqOutput) -> Any:
    return (x * out[0], *_reads(out))


def test_reads_of_an_output_passed_in_match_eager_and_a_changed_output_recompiles() -> None:
    def make() -> tuple[Any, ...]:
        return torch.ones(3), SeqOutput(last_hidden_state=torch.arange(3.0), past=(torch.ones(1),))

    runs = run_three_ways(_passed_in, make)
    same(runs.ours, runs.eager)
    assert runs.our_graphs == runs.their_graphs == 1
    compiled = compile_api.compile(_passed_in)
    first = make()
    same(compiled(*first), _passed_in(*first))
    changed = SeqOutput(last_hidden_state=torch.arange(3.0), attentions=torch.zeros(3))
    same(compiled(torch.ones(3), changed), _passed_in(torch.ones(3), changed))


class Encoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor, return_dict: bool = True) -> Any:
        h = self.proj(x)
        out = SeqOutput(last_hidden_state=h, hidden_states=h.relu())
        return out if return_dict else out.to_tuple()


class Seq2Seq(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = Encoder()

    def forward(self, x: torch.Tensor) -> Any:
        enc = self.encoder(x)
        as_tuple = self.encoder(x, return_dict=False)
        if "hidden_states" in enc.keys():
            x = x + enc["hidden_states"]
        extra = {k: v for k, v in enc.items() if k != "last_hidden_state"}
        hidden = enc[0] + as_tuple[1] + x
        return SeqOutput(last_hidden_state=hidden, attentions=extra["hidden_states"])


def test_a_submodules_output_read_by_keys_items_and_index_is_one_graph() -> None:
    torch.manual_seed(0)
    model = Seq2Seq()
    runs = run_three_ways(
        model, lambda: (torch.randn(2, 3, generator=torch.Generator().manual_seed(1)),)
    )
    same(dict(runs.ours), dict(runs.eager))
    assert type(runs.ours) is SeqOutput
    assert runs.our_graphs == runs.their_graphs == 1
