"""``obj[a:b]`` on a user class runs its ``__getitem__`` in the trace on every Python: 3.12+
compile it to BINARY_SLICE, which used to skip the class's method (a break, and a second graph,
where 3.11's BUILD_SLICE + BINARY_SUBSCR traced it)."""

from __future__ import annotations

from typing import Any

import torch

import compile_api


class Rows:
    def __init__(self, *values: torch.Tensor) -> None:
        self.values = list(values)
        self.log: list[object] = []

    def __getitem__(self, key: Any) -> Any:
        self.log.append(("get", key))
        return self.values[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self.log.append(("set", key))
        self.values[key] = value


def _slices(x: torch.Tensor) -> tuple[Any, ...]:
    rows = Rows(x, x + 1, x * 2)
    tail = rows[1:]
    return sum(tail), rows[:2], rows.log


def test_slicing_a_user_object_traces_its_getitem_in_one_graph_without_a_break() -> None:
    graphs: list[torch.fx.GraphModule] = []

    def counting(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    x = torch.randn(3)
    got = compile_api.compile(_slices, backend=counting, fullgraph=True)(x)  # no break
    want = _slices(x)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])
    assert got[2] == want[2] == [("get", slice(1, None)), ("get", slice(None, 2))]
    assert len(graphs) == 1
