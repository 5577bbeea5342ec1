"""routedvlm.training.calibration — certified calibration of the decision rule (Learn-then-Test).

Modules: `rule_family` (the members a router can express, as chains), `ltt` (p-values, fixed-sequence testing),
`certify` (the member that meets the target at the least expected latency, and its certificate).
"""
