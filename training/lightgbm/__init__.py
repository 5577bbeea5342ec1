"""The `lightgbm` router type's training unit: its trainer (the one the registry names), its settings (config.py), the fit the LightGBM
comparisons and the `--calib-fraction auto` simulation use, and a ladder's sub-pair router (docs/layout.md).

Nothing is imported here, so the sub-pair fit (reached from the shared steps) is imported without closing an import
circle through the trainer, which imports the shared steps.
"""
NAME = "lightgbm"  # the router type this unit trains (its name in policy.json and the registry)
