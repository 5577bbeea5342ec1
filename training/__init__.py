"""routedvlm.training — train-router: fit, certify a decision rule, evaluate against baselines, track and register.

File map: docs/layout.md.
"""
