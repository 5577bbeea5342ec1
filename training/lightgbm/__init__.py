"""The `lightgbm` router type's training unit: trainer.py (`train_lightgbm`, the trainer the registry names; `fit_router`;
`choose_share`, the `--calib-fraction auto` simulation) and pairs.py (`fit_pair_router`, a ladder's sub-pair router).

Nothing is imported here, so sub_pairs.py (reached from ../steps.py) can import pairs.py without closing an import
circle through the trainer, which imports steps.py.
"""
NAME = "lightgbm"  # the router type this unit trains (its name in policy.json and the registry)
