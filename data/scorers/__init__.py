"""Benchmark scorers: score(metric, prediction, references, options=None, **extra) -> float in [0, 1]."""
