"""A module-level dict keyed by classes and typing forms (huggingface_hub's type validators,
reached from transformers' config checks) is tracked item by item, as torch.compile does: lookups,
iteration and ``get`` match eager in one graph, and a key added later recompiles."""

from __future__ import annotations

import typing

import torch

import compile_api

VALIDATORS: dict[typing.Any, int] = {int: 1, list: 2, typing.Union: 3}


def look_up(x: torch.Tensor) -> tuple[torch.Tensor, list[tuple[bool, int]], int | None]:
    seen = [(k is list, v) for k, v in VALIDATORS.items()]
    names = sum(len(k.__name__) for k in VALIDATORS if isinstance(k, type))
    total = x + VALIDATORS.get(list, 0) + VALIDATORS[typing.Union] + names
    return total, seen, VALIDATORS.get(dict)


def test_a_dict_keyed_by_classes_matches_eager_in_one_graph_and_recompiles_on_a_new_key() -> None:
    compile_api.reset()
    graphs: list[object] = []

    def backend(gm: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> object:
        graphs.append(gm)
        return gm.forward

    compiled = compile_api.compile(look_up, fullgraph=True, backend=backend)
    x = torch.arange(3.0)
    try:
        for _ in range(2):
            got, want = compiled(x), look_up(x)
            torch.testing.assert_close(got[0], want[0])
            assert got[1:] == want[1:]
        assert len(graphs) == 1
        VALIDATORS[dict] = 7
        got, want = compiled(x), look_up(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1:] == want[1:] and got[2] == 7
        assert len(graphs) == 2
    finally:
        VALIDATORS.pop(dict, None)
        compile_api.reset()
