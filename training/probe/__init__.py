"""routedvlm.training.probe — train-router for the router types that read the model itself (`--router lora-probe`,
`--router self-probe`).

Modules: `lora_probe` (`train_probe`), `fit` (LoRA adapter + head), `data` (the samples behind a labels table),
`evaluate` (same rows and curves as the LightGBM router), `self_probe` (the large model's own hidden state).
Import from the modules; nothing is re-exported.
"""
