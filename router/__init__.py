"""routedvlm.router — features → P(correct) per strategy → decision; artifact format; loading.

Every router type is reached through one registry (`routedvlm.router.router_types`). File map: docs/layout.md.

Imports none of the other routedvlm packages except `routedvlm.errors` (the root of the dependency graph).
Importing it is cheap: lightgbm and mlflow are imported only by the functions that need them.
"""
from routedvlm.errors import RoutedVLMError, RouterError
from .base import Router
from .decision_rules import Decision, choose
from .lightgbm import LightGBMRouter
from .ladder import Step, next_action, stages_to_pay
from .load import load_router
from .policy import Policy
from .baselines import FixedRouter, MutualVerificationRouter, make_rule_router
from .router_types import ROUTER_TYPES, RouterType, register_router_type, router_type
from .strategies import DEFAULT_K_GRID, Strategy, default_strategies, parse_strategy, strategy_order, transfer_id
from .tracking import CHAMPION_ALIAS, DEFAULT_MODEL_NAME, resolve_tracking_uri, setup_mlflow


def log_router_model(router_dir, name: str = "router", **kwargs):
    """Log a router folder to MLflow as a pyfunc model (see `routedvlm.router.mlflow_model`)."""
    from .mlflow_model import log_router_model as _log

    return _log(router_dir, name, **kwargs)


__all__ = [
    "CHAMPION_ALIAS", "DEFAULT_K_GRID", "DEFAULT_MODEL_NAME", "Decision", "FixedRouter", "LightGBMRouter",
    "MutualVerificationRouter", "Policy", "ROUTER_TYPES", "RoutedVLMError", "Router", "RouterError", "RouterType", "Strategy",
    "Step", "choose", "default_strategies", "next_action", "stages_to_pay", "load_router", "log_router_model", "make_rule_router", "parse_strategy",
    "register_router_type", "resolve_tracking_uri", "router_type", "setup_mlflow", "strategy_order", "transfer_id",
]
