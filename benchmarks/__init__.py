"""Benchmarks: a snapshot generator, baseline engines and a runner (see benchmarks/README.md)."""
