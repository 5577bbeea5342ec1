"""routedvlm.training.demo — `routedvlm demo` (`make demo`): the whole product on the embedded toy world.

Import from the modules. File map: docs/layout.md.
"""
