"""Inspection: THE frame pipeline and everything that must agree with it (runtime, sources, references, outputs,
inspector, calibrate, validate)."""
