"""Sources, guard kinds and a fast compiled guard check."""

__all__: list[str] = []
