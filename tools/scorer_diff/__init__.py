"""`python -m tools.scorer_diff`: routedvlm.data.scorers vs the reference scorers on generated cases (see __main__)."""
