"""Strata's differential fuzzer: random programs, eager vs compiled (see README.md here)."""
