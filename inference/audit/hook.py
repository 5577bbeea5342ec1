"""How RoutedVLM audits itself: `AuditConfig` (the settings), the certified promise read from the router's
certificate (`promise`), and `make_auditor`, which RoutedVLM calls once when `audit_rate` > 0.

The reference strategy R and the limit alpha come from the certificate in policy.json (`reference`, `risk_limit`,
for a regret certificate); a router without one (a fixed strategy, mutual verification, an uncertified rule) is
audited against `large_reason` (the accuracy ceiling) at the `alpha` the user names.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from routedvlm.errors import ConfigError
from routedvlm.router.strategies import parse_strategy

from .bounds import check_level
from .monitor import AuditMonitor
from .shadow import ShadowAuditor

logger = logging.getLogger(__name__)
DEFAULT_REFERENCE = "large_reason"


@dataclass
class AuditConfig:
    """Settings of shadow audits (RoutedVLM keyword `audit=`, `routedvlm serve --audit-*`)."""

    rate: float = field(default=0.0, metadata={"help": "fraction of requests audited (0 = off)"})
    log: object = field(default=None, metadata={"help": "where audit records go: a callable, e.g. "
                                                        "routedvlm.data.audit.AuditLog(path); None keeps them in memory"})
    store_inputs: bool = field(default=False, metadata={"help": "store each audited request's question and image"})
    queue_size: int = field(default=64, metadata={"help": "audits waiting at most; beyond, audits are skipped"})
    alpha: float | None = field(default=None, metadata={"help": "limit on the regret rate (default: the certificate's)"})
    reference: str | None = field(default=None, metadata={"help": "reference strategy (default: the certificate's)"})
    delta: float = field(default=0.05, metadata={"help": "level of the live bounds (P(any false status) <= delta)"})
    window: int = field(default=1000, metadata={"help": "audits per epoch (0: one epoch); drift shows within 2 epochs"})
    seed: int | None = field(default=None, metadata={"help": "seed of the audit draw (tests)"})

    def __post_init__(self):
        if isinstance(self.rate, bool) or not isinstance(self.rate, (int, float)) or not 0 <= self.rate <= 1:
            raise ConfigError(f"The `audit_rate` parameter must be a number in [0, 1]. Got {self.rate!r} instead.")
        if isinstance(self.queue_size, bool) or not isinstance(self.queue_size, int) or self.queue_size < 1:
            raise ConfigError(f"The `audit_queue_size` parameter must be a positive integer. Got {self.queue_size!r}.")
        if self.log is not None and not callable(self.log):
            raise ConfigError(f"The audit `log` must be a callable taking one record, such as "
                              f"routedvlm.data.audit.AuditLog(path). Got {self.log!r} instead.")
        if self.reference is not None:
            parse_strategy(self.reference)
        check_level(self.delta)


def promise(policy, cfg: AuditConfig) -> tuple[str, float, str]:
    """(reference strategy, alpha, where they come from) for a router's policy."""
    cert = getattr(policy, "certificate", None) or {}
    # a difference certificate is audited on the regret (>= the difference): "holding" then implies the certificate
    regret = (str(cert.get("loss", "")).startswith(("regret", "accuracy difference")) and cert.get("reference")
              and cert.get("risk_limit"))
    reference = cfg.reference or (cert["reference"] if regret else DEFAULT_REFERENCE)
    alpha = cfg.alpha if cfg.alpha is not None else (float(cert["risk_limit"]) if regret else None)
    if alpha is None:
        raise ConfigError(
            f"The router ({policy.router_type}) has no regret certificate to audit, so there is no limit to check: "
            "pass `audit_alpha` (routedvlm serve --audit-alpha), the regret rate against "
            f"{reference} that you want to hold.")
    source = "certificate" if regret and cfg.reference is None and cfg.alpha is None else "given"
    if not regret and cfg.reference is None:
        source = f"no regret certificate: reference {DEFAULT_REFERENCE}, alpha given"
    return reference, alpha, source


def make_auditor(routed, cfg: AuditConfig) -> ShadowAuditor | None:
    """The auditor of `routed` (None when `cfg.rate` is 0)."""
    if not cfg.rate:
        return None
    reference, alpha, source = promise(routed.active_router.policy, cfg)
    monitor = AuditMonitor(alpha=alpha, reference=reference, router=routed.router_source, delta=cfg.delta,
                           window=cfg.window)
    logger.info("auditing %.4g of requests against %s at alpha %.4f (%s), delta %g, epochs of %s audits",
                cfg.rate, reference, alpha, source, cfg.delta, cfg.window or "all")
    store = cfg.store_inputs or bool(getattr(cfg.log, "store_inputs", False))  # a log opened to store inputs gets them
    return ShadowAuditor(routed, cfg.rate, monitor, sink=cfg.log, store_inputs=store,
                         queue_size=cfg.queue_size, seed=cfg.seed)
