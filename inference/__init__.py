"""routedvlm.inference — model backends, stages, selectors, the collaborative pipeline, RoutedVLM, server."""
