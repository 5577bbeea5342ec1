"""routedvlm.inference.serving — `routedvlm serve`: RoutedVLM as an OpenAI-compatible chat-completions endpoint.

Import from the modules; nothing is re-exported (FastAPI is imported only by the server). File map: docs/layout.md.
"""
