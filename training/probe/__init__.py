"""routedvlm.training.probe — train-router for the router types that read the model itself (`--router lora-probe`,
`--router self-probe`). Import from the modules; nothing is re-exported. File map: docs/layout.md.
"""
