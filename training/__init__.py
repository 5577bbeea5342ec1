"""routedvlm.training — train-router: fit, certify a decision rule, evaluate against baselines, track and register.

Files: `train_cli.py` (the command, flags from `config.TrainConfig`), `pipeline.py` (`train_router(config)`),
`labels_io.py` (read + validate labels), `split.py` (train/calibration/test), `costs.py` (the cost model),
`fit.py` (features per mode, one LightGBM model per strategy), `rule_family.py` (the decision rules a router
can express), `ltt.py` + `certify.py` (Learn-then-Test calibration to a target), `evaluate.py` (baselines,
curves, areas, utility) + `report.py` (the table), `plot.py` (PNG), `tracking.py` (MLflow run, registry,
champion alias), `synthetic.py` (labels with a known ground truth), `cli.py` (the `routedvlm` dispatcher).
"""
