"""routedvlm.training — train-router: fit, certify a decision rule, evaluate against baselines, track and register.

Files: `train_cli.py` (the command, flags from `config.TrainConfig`), `pipeline.py` (`train_router(config)`: the
trainer of the configured router type, from the registry `routedvlm.router.router_types`; the LightGBM trainer),
`steps.py` (what every trainer shares), `labels_io.py`, `split.py`, `costs.py`, `fit.py`, `evaluate.py` + `report.py`,
`plot.py`, `tracking.py` + `registry.py` + `champion.py`, `synthetic.py`, `cli.py` (the `routedvlm` dispatcher);
`calibration/`, `probe/` (the probe types' trainers) and `demo/` hold their families.
"""
