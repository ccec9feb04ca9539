"""Settings every test file needs before any of them is imported.

Triton binds its language functions (tl.sum, tl.max, ...) to interpreted or compiled form when
it is first imported, and torch's own frontend imports triton (a test module that imports
``torch._dynamo`` at collection does): so the Triton interpreter that runs the Triton tests on a
machine without a GPU is chosen here, before collection, not in those test files.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
