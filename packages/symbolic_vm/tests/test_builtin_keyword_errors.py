"""A builtin that takes no keyword arguments, called with one inside compiled code, raises eager's
TypeError (found by PyTorch's own test_misc::test_invalid_args_builtin: the keyword was dropped
and isinstance(x, T, invalid=True) returned a value)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from counting_backend import Counting
from torch_reference import torch_reference

import compile_api


def _isinstance_with_a_keyword(x: torch.Tensor) -> torch.Tensor:
    return x + 1 if isinstance(x, torch.Tensor, invalid=True) else x  # type: ignore[call-arg]


def _len_with_a_keyword_caught(x: torch.Tensor) -> tuple[torch.Tensor, str]:
    try:
        n = len([x], key=1)  # type: ignore[call-arg]
    except TypeError as e:
        return x * 2, str(e)
    return x + n, ""


def _message(fn: Any, x: torch.Tensor) -> str:
    with pytest.raises(TypeError) as caught:
        fn(x)
    return str(caught.value)


def test_an_escaping_keyword_error_is_eagers() -> None:
    x = torch.ones(3)
    want = _message(_isinstance_with_a_keyword, x)
    compile_api.reset()
    assert _message(compile_api.compile(_isinstance_with_a_keyword), x) == want
    torch._dynamo.reset()
    with torch_reference():
        assert _message(torch.compile(_isinstance_with_a_keyword, backend="eager"), x) == want


def test_under_fullgraph_it_raises_instead_of_returning_a_value() -> None:
    # (an exception escaping the compiled function is reported as unsupported under
    # fullgraph=True, naming eager's TypeError; before, a value came back)
    compile_api.reset()
    compiled = compile_api.compile(_isinstance_with_a_keyword, fullgraph=True)
    with pytest.raises(Exception, match="takes no keyword arguments"):
        compiled(torch.ones(3))


def test_a_caught_keyword_error_stays_in_one_graph() -> None:
    x = torch.randn(3)
    want = _len_with_a_keyword_caught(x)
    compile_api.reset()
    ours = Counting()
    got = compile_api.compile(_len_with_a_keyword_caught, backend=ours)(x)
    torch.testing.assert_close(got[0], want[0])
    assert got[1] == want[1] == "len() takes no keyword arguments"
    assert ours.count == 1
