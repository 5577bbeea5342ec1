"""routedvlm.training — train-router: fit, calibrate, evaluate against baselines, track and register."""
