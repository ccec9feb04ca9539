"""deberta_v2 as transformers up to 5.17 ships it: ``make_log_bucket_position`` scripted.

transformers 5.17 decorates that function with ``torch.jit.script``; later versions don't. The
GPU machine's 5.17 made the zoo's deberta_v2 break at the ScriptFunction call. Here the
installed module's function is scripted the same way for the test, and the case must still
capture as torch.compile does: one graph, no break, results equal to eager.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from benchmarks.zoo.measure import assert_matches, run_eager, run_strata, run_torch
from benchmarks.zoo.models import case
from benchmarks.zoo.vision import import_transformers


@pytest.fixture
def scripted_bucket_function() -> Iterator[None]:
    import_transformers()
    from transformers.models.deberta_v2 import modeling_deberta_v2 as deberta

    original = deberta.make_log_bucket_position
    if isinstance(original, torch.jit.ScriptFunction):
        yield  # already scripted by this transformers version
        return
    deberta.make_log_bucket_position = torch.jit.script(original)
    try:
        yield
    finally:
        deberta.make_log_bucket_position = original


@pytest.mark.usefixtures("scripted_bucket_function")
def test_deberta_v2_with_a_scripted_bucket_function_captures_as_torch() -> None:
    c = case("deberta_v2-infer")
    expected = run_eager(c)
    reference = run_torch(c, "eager")
    ours = run_strata(c, "eager", fullgraph=reference.breaks == 0)
    assert_matches(ours.tensors, expected, "eager")
    assert_matches(reference.tensors, expected, "eager")
    assert (ours.graphs, ours.breaks) == (reference.graphs, reference.breaks) == (1, 0)
