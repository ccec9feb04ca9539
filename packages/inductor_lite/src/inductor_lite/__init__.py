"""Loop IR, fusion and C++/OpenMP + Triton code generation."""

__all__: list[str] = []
