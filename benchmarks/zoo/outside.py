"""The models outside the zoo as ``zoo_cpu.py --outside`` runs them: ``model_sweep.SWEEP``.

The sweep (``benchmarks/model_sweep.py``) is the set an outside reviewer would try, built in the
zoo's tiny sizes and never tuned against; the sweep itself checks capture (graphs, breaks,
results). Here each of its models gives an ``infer`` case and, for the transformers models, a
``train`` case (forward with labels, the loss's backward), measured like the zoo's own.
"""

from __future__ import annotations

from .models import Case

__all__ = ["outside_cases"]


def outside_cases() -> list[Case]:
    """The sweep's models as zoo cases (imported late: the sweep module builds its table)."""
    from benchmarks.model_sweep import SWEEP

    cases = []
    for model in SWEEP.values():
        cases.append(Case(model, "infer"))
        if model.library == "transformers":
            cases.append(Case(model, "train"))
    return cases
