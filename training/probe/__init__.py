"""routedvlm.training.probe — train-router for the router types that read the model itself (`--router lora-probe`,
`--router self-probe`). Import from the modules; nothing is re-exported. File map: docs/layout.md.
"""
LORA_PROBE = "lora-probe"  # the router types this unit trains (their names in policy.json and the registry)
SELF_PROBE = "self-probe"
