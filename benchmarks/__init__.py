"""Benchmarks beside Strata; a package so tests can import ``benchmarks.zoo`` from the repo root."""
