"""The behaviour corpus (``corpus.py``): every case gives eager's results under Strata on two
calls, and is captured in no more graphs and no more broken frames than torch.compile makes
of it in the same test. ``python -m tests.behaviour`` prints the pass rate and each miss.

Cases Strata does not yet capture as torch.compile does are strict xfails naming the cause; a
wrong result is never listed here: it is a bug to fix.
"""

from __future__ import annotations

import pytest
from torch_reference import IS_REFERENCE, torch_reference

from .corpus import CASES
from .measure import run

# case name -> why Strata makes more graphs or breaks than torch.compile
KNOWN_GAPS: dict[str, str] = {}


def _param(name: str) -> object:
    reason = KNOWN_GAPS.get(name)
    # strict on the reference torch only: on an older one the comparison with torch.compile is
    # a warning, and the case passes
    marks = [pytest.mark.xfail(strict=IS_REFERENCE, reason=reason)] if reason else []
    return pytest.param(name, marks=marks, id=name)


_BY_NAME = {c.name: c for c in CASES}


@pytest.mark.parametrize("name", [_param(c.name) for c in CASES])
def test_case_matches_eager_and_is_captured_like_torch_compile(name: str) -> None:
    result = run(_BY_NAME[name])
    assert result.same_as_eager, result.detail
    with torch_reference():
        assert result.captured_like_torch, (
            f"Strata {result.graphs} graphs / {result.breaks} broken frames, "
            f"torch.compile {result.torch_graphs} / {result.torch_breaks}"
        )


def test_corpus_names_are_unique_and_gaps_name_real_cases() -> None:
    assert len(_BY_NAME) == len(CASES)
    assert set(KNOWN_GAPS) <= set(_BY_NAME)
