"""Joint forward/backward aten graphs, functionalization and min-cut partitioning."""

__all__: list[str] = []
