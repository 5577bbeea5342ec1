"""routedvlm.training.calibration — certified calibration of the decision rule (Learn-then-Test).

File map: docs/layout.md.
"""
