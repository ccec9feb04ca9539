"""aten ops lowered to the loop IR: one table, ``LOWERINGS`` (``registry.py``), filled by a
module per family: ``pointwise`` (by ``ir.Op``), ``reductions``, ``indexing``, ``views`` and
``convolutions``. A new op: ``@register(aten.op.overload)`` on a lowering in its family's
module (and, for a new scalar operation, an ``ir.Op`` member rendered by each backend).
"""

# Each module registers its lowerings on import; views comes after pointwise on purpose: its
# ``*_copy`` twins reuse lowerings registered there (alias).
from . import convolutions, indexing, pointwise, reductions, views  # noqa: F401
from .registry import LOWERINGS, Lowering, register

__all__ = ["LOWERINGS", "Lowering", "register"]
