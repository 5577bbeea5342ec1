"""The OpenAI-compatible HTTP transport of `sides/openai.py`: the client, reply parsing, remote specs, the remote prefix."""
