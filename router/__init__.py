"""routedvlm.router — features → P(correct) per strategy → decision; artifact format; loading.

Imports none of the other routedvlm packages (it is the root of the dependency graph).
"""
from .errors import RoutedVLMError
from .strategies import DEFAULT_K_GRID, Strategy, default_strategies, parse_strategy, transfer_id

__all__ = ["RoutedVLMError", "DEFAULT_K_GRID", "Strategy", "default_strategies", "parse_strategy", "transfer_id"]
