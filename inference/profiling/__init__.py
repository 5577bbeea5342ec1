"""routedvlm.inference.profiling — `routedvlm profile`: where each model's latency goes, and a fitted latency model.

Import from the modules; nothing is re-exported. File map: docs/layout.md.
"""
