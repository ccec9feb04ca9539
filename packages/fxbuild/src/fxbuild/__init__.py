"""Builds torch.fx GraphModules with fake-tensor example values."""

__all__: list[str] = []
