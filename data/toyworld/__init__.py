"""The embedded toy world: a generated visual-reasoning task and a pair of tiny VLMs trained on it."""
