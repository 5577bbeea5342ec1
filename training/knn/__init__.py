"""The `knn` router type's training unit: its trainer (`trainer.py`, the one the registry names) and its settings
(`config.py`). Nothing is imported here, so `--help` reads the settings without the trainer's imports.
"""
NAME = "knn"  # the router type this unit trains (its name in policy.json and the registry)
