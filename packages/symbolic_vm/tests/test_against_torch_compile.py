"""Side by side with torch.compile (the reference, used only in tests): same op counts, one graph.

Dynamo's graphs are compared by the number of call_function/call_method nodes; ours must not be
larger (no extra work captured) and, for these programs, is equal.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_end_to_end import MLP, Block, readme_toy_no_branch
from vm_harness import check


def _dynamo_op_counts(fn, *args):
    import torch._dynamo

    torch._dynamo.reset()
    counts: list[int] = []

    def counting(gm, example_inputs):
        counts.append(sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method")))
        return gm.forward

    torch.compile(fn, backend=counting, fullgraph=True)(*args)
    torch._dynamo.reset()
    return counts


def attention_scores(q, k):
    scale = q.shape[-1] ** -0.5
    return F.softmax(q @ k.transpose(-2, -1) * scale, dim=-1)


CASES = [
    ("readme_toy", lambda: (readme_toy_no_branch, (torch.randn(10), torch.randn(10)))),
    ("mlp", lambda: (MLP().forward, (torch.randn(3, 8),))),
    ("transformer_block", lambda: (Block().forward, (torch.randn(2, 5, 16),))),
    ("attention_scores", lambda: (attention_scores, (torch.randn(2, 4, 8), torch.randn(2, 4, 8)))),
]


@pytest.mark.parametrize("name,make", CASES, ids=[c[0] for c in CASES])
def test_same_graph_count_and_op_count_as_torch_compile(name, make):
    fn, args = make()
    ours = check(fn, *args)
    theirs = _dynamo_op_counts(fn, *args)
    assert ours.graph_count == len(theirs) == 1
    assert ours.op_count() == theirs[0]
