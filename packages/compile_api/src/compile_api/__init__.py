"""The torch.compile-compatible API of Strata."""

__all__: list[str] = []
