"""Benchmarks and evaluation scripts (not installed): latency, shared-CPU throughput, tiling, drift.
Run from a checkout: ``python -m benchmarks.bench``, ``python -m benchmarks.evaluate_drift`` ...; tests/benchmarks smoke-tests each."""
