"""The per-call check that inputs written in place share no memory with other inputs.

Beyond a few inputs the wrapper sorts the address ranges instead of testing every pair (an
optimizer step writes hundreds of parameters). Checked against the pairwise definition on
random ranges, and end to end against eager with many written inputs, two of them overlapping.
"""

from __future__ import annotations

import random

import torch

import aot
from inductor_lite import CompiledGraph, InductorConfig, compile_aten_graph
from inductor_lite.wrapper import _written_range_overlaps


def _pairwise(ranges: list[tuple[int, int, bool]]) -> bool:
    return any(
        (wa or wb) and a0 < b1 and b0 < a1 and a0 < a1 and b0 < b1
        for i, (a0, a1, wa) in enumerate(ranges)
        for (b0, b1, wb) in ranges[i + 1 :]
    )


def test_the_sorted_check_agrees_with_every_pair_on_random_ranges() -> None:
    rng = random.Random(0)
    agreed_true = 0
    for _ in range(3000):
        ranges = []
        for _ in range(rng.randint(0, 9)):
            start = rng.randrange(0, 200)
            ranges.append((start, start + rng.randrange(0, 30), rng.random() < 0.4))
        expected = _pairwise(ranges)
        assert _written_range_overlaps(ranges) == expected, ranges
        agreed_true += expected
    assert 300 < agreed_true < 2700  # both answers were exercised


N = 12  # parameters: 12 written inputs, 24 tensor inputs, past the inline tests


def _step(*ts: torch.Tensor) -> None:
    ps, gs = ts[:N], ts[N:]
    with torch.no_grad():
        for p, g in zip(ps, gs, strict=True):
            p.sub_(0.1 * g)


def test_many_written_inputs_use_the_sorted_check_and_overlaps_take_the_copying_path(
    config: InductorConfig,
) -> None:
    graphs: list[object] = []

    def compiler(gm: torch.fx.GraphModule, example_inputs: object) -> object:
        graphs.append(compile_aten_graph(gm, example_inputs, config=config))  # type: ignore[arg-type]
        return graphs[-1]

    fn = aot.aot_function(_step, compiler, keep_input_mutations=True)
    ps = [torch.randn(50) for _ in range(N)]
    gs = [torch.randn(50) for _ in range(N)]
    ps_e = [p.clone() for p in ps]
    fn(*ps, *gs)
    _step(*ps_e, *gs)
    for p, q in zip(ps, ps_e, strict=True):
        torch.testing.assert_close(p, q)
    (c,) = graphs
    assert isinstance(c, CompiledGraph)
    assert "_overlapping((" in c.wrapper_source
    # count the calls that take the copying path
    stores = getattr(c.run, "then", c.run)  # the storing wrapper (CUDA: after the first call)
    safe = stores.__globals__["_safe"]
    copying: list[int] = []
    stores.__globals__["_safe"] = lambda args: (copying.append(1), safe(args))[1]
    c(*ps, *gs)  # the compiled graph called directly: aot's own overlap check is not in the way
    _step(*ps_e, *gs)
    assert copying == []
    # a gradient that is a shifted view of its own parameter: stores would feed later loads
    base = torch.randn(52)
    ps[3], gs[3] = base[2:], base[:50]
    base_e = base.clone()
    ps_e = [p.clone() for p in ps]
    ps_e[3] = base_e[2:]
    c(*ps, *gs)
    _step(*ps_e[:3], base_e[2:], *ps_e[4:], *gs[:3], base_e[:50], *gs[4:])
    assert copying == [1]
    torch.testing.assert_close(base, base_e)
    for k in (0, 5, 11):
        torch.testing.assert_close(ps[k], ps_e[k])

