"""routedvlm.training.demo — `routedvlm demo` (`make demo`): the whole product on the embedded toy world.

Modules: `cli` (the command, and `--random`), `toy` (label → train-router → register → RoutedVLM, `run_toy_demo`),
`routers` (which router types to train), `table` (the side-by-side table). Import from the modules.
"""
