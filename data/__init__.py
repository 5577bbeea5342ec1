"""routedvlm.data — samples, dataset adapters, scorers/, labels/ (the labels schema) and labelling/ (the labelling job).

File map: docs/layout.md.
"""
