"""routedvlm.inference.profiling — `routedvlm profile`: where each model's latency goes, and a fitted latency model.

Modules: `cli` (the command), `profiler` (measure on simulated inputs: `inputs`, `env`), `latency_model` (cost of a
stage from its token counts; also prices labels with `--cost`), `crossover` + `plots`, `remote` (models behind a
server), `shapes` + `shape_memory` + `shape_configs/` (published shapes with random weights), `escalation` (second
stage from the cached prefix vs cold), `gpu_check` (`make gpu-check`). Import from the modules; nothing is re-exported.
"""
