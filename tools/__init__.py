"""Developer tools: not part of the routedvlm package, run from the repository root (e.g. `make scorer-diff`)."""
