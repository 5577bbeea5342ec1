"""routedvlm.training — train-router: fit, calibrate, evaluate against baselines, track and register.

Files: `train_cli.py` (the command, flags from `config.TrainConfig`), `pipeline.py` (`train_router(config)`),
`labels_io.py` (read + validate labels), `split.py` (train/calibration/test), `costs.py` (the cost model),
`fit.py` (features per mode, one LightGBM model per strategy), `calibrate.py` (tau for a target),
`evaluate.py` (baselines, curve, AUC, utility, table), `plot.py` (PNG), `tracking.py` (MLflow run, registry,
champion alias), `synthetic.py` (labels with a known ground truth), `cli.py` (the `routedvlm` dispatcher).
"""
