"""Code with many live locals across a graph break compiles and matches eager on every Python.

On 3.13 two locals are often read or written by one instruction (LOAD_FAST_LOAD_FAST...) whose
oparg holds each local's slot in 4 bits. A resume function puts its live locals first, so the
pair's locals can move past slot 15: the assembler then splits the pair, and the resume
function's offsets still map back to the original code (before: the frame ran eagerly).
"""

from __future__ import annotations

import sys
import warnings

import torch

import compile_api


def _many_locals(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    x = a + 1
    y = b + 2
    z0 = a * 0; z1 = a * 1; z2 = a * 2; z3 = a * 3; z4 = a * 4; z5 = a * 5; z6 = a * 6  # noqa: E702
    z7 = a * 7; z8 = a * 8; z9 = a * 9; z10 = a * 10; z11 = a * 11; z12 = a * 12  # noqa: E702
    z13 = a * 13
    print("a graph break")
    s = z0 + z1 + z2 + z3 + z4 + z5 + z6 + z7 + z8 + z9 + z10 + z11 + z12 + z13
    x, y = y, x
    return x * y + s


def test_many_live_locals_across_a_break_compile_and_match_eager(counter) -> None:
    assemble_module = sys.modules["symbolic_vm.bytecode.assemble"]
    splits: list[int] = []
    original = assemble_module._split_wide_pairs

    def spy(items, slot_of):  # type: ignore[no-untyped-def]
        splits.append(1)
        return original(items, slot_of)

    assemble_module._split_wide_pairs = spy
    try:
        fn = compile_api.compile(_many_locals, backend=counter)
        a, b = torch.randn(3), torch.randn(3)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # no "runs it eagerly"
            torch.testing.assert_close(fn(a, b), _many_locals(a, b))
            torch.testing.assert_close(fn(a, b), _many_locals(a, b))
    finally:
        assemble_module._split_wide_pairs = original
    assert counter.count == 2  # before and after the break
    if sys.version_info >= (3, 13):
        assert splits, "the resume function needed no split: the test lost its point"
