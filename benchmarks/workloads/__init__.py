"""The benchmark workloads, in the order the harness runs and reports them."""

from __future__ import annotations

from .base import INFERENCE, OVERHEAD, SEED, TRAINING, Instance, Tolerance, Workload
from .elementwise import LAYER_NORM_SOFTMAX, POINTWISE
from .models import CNN, GPT4, MLP_INFERENCE, TRANSFORMER_BLOCK
from .overhead import ADD_ONE, TEN_OPS
from .training import MLP_TRAIN, TRANSFORMER_BLOCK_TRAIN

ALL: tuple[Workload, ...] = (
    POINTWISE,
    LAYER_NORM_SOFTMAX,
    MLP_INFERENCE,
    TRANSFORMER_BLOCK,
    GPT4,
    CNN,
    MLP_TRAIN,
    TRANSFORMER_BLOCK_TRAIN,
    ADD_ONE,
    TEN_OPS,
)
BY_NAME: dict[str, Workload] = {w.name: w for w in ALL}

__all__ = [
    "ALL",
    "BY_NAME",
    "INFERENCE",
    "OVERHEAD",
    "SEED",
    "TRAINING",
    "Instance",
    "Tolerance",
    "Workload",
]
