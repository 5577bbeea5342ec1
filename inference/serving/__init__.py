"""routedvlm.inference.serving — `routedvlm serve`: RoutedVLM as an OpenAI-compatible chat-completions endpoint.

Modules: `cli` (the command), `server` (the FastAPI app), `protocol` (request validation, OpenAI-shaped errors),
`completions` (response bodies and stream chunks), `metrics` (Prometheus). Import from the modules; nothing is
re-exported (FastAPI is imported only by the server).
"""
