"""routedvlm.data — samples, dataset adapters, scorers, the labels schema and the labelling job."""
