"""routedvlm.training — train-router: fit, certify a decision rule, evaluate against baselines, track and register.

Files: `train_cli.py` (the command, flags from `config.TrainConfig`), `pipeline.py` (`train_router(config)`),
`labels_io.py`, `split.py`, `costs.py`, `fit.py`, `evaluate.py` + `report.py`, `plot.py`, `tracking.py` + `registry.py`,
`synthetic.py`, `cli.py` (the `routedvlm` dispatcher); `calibration/`, `probe/` and `demo/` hold their families.
"""
