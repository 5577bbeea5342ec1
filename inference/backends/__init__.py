"""Model backends: transformers (local checkpoints) and OpenAI-compatible HTTP servers."""
