"""The live statement of an audited router: counts of shadow audits, anytime-valid bounds, and the status.

Each audit of a uniformly sampled request gives d = 1[routed answer != reference answer]; gold feedback on it
gives r = 1[reference right and routed wrong] (the certified regret; r <= d). Upper bound on the regret rate: the
confidence sequence of bounds.py on z = r where gold is known, else d (z >= r, so it bounds the regret whether or
not gold arrives, and however it is chosen). Lower bound: on y = r where gold is known, else 0 (y <= r).
Gold comes only from the holder of the feedback key (serve --feedback-key), and each audited request's once; the
snapshot reports the gold-free upper bound (on the disagreement rate alone) beside the gold-informed one, so a
status that gold moved is never mixed in silently.
Status: *holding* (upper bound <= alpha), *violated* (lower bound > alpha: only with gold), else *unproven*; within
an epoch a status once reached stays (the running intersection of the bounds, valid like the bounds themselves).
Audits are grouped in epochs of `window` audits (0: one epoch for ever); epoch k uses level
delta * 6 / (pi^2 k^2), so the chance of any false *holding* or false *violated*, over all epochs and all times, is
<= delta. An epoch decides *holding*, *violated*, or *unproven* as soon as the rate the upper bound covers is itself
shown to be above alpha (the promise cannot be shown to hold on this traffic: how a large drift shows at once,
without gold). Until the current epoch decides, the status is the previous epoch's verdict, an undecided epoch
counting as *unproven*: holding must be earned again in every epoch, so any shift that breaks the promise ends
*holding* within two epochs.
"""
from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from routedvlm.errors import ConfigError, InputError

from .bounds import above, below, check_level, lower_bound, upper_bound

logger = logging.getLogger(__name__)
HOLDING, UNPROVEN, VIOLATED = "holding", "unproven", "violated"
STATUSES = (HOLDING, UNPROVEN, VIOLATED)
MAX_REMEMBERED = 100_000  # audits that can still take gold feedback (the most recent ones)
HISTORY_ROWS = 10_000  # status history kept in memory (the audit log keeps all of it on disk)


class FeedbackError(InputError, KeyError):
    """Gold feedback for a request that was not audited, is no longer remembered (`status` 404), or already has
    gold (409)."""

    def __init__(self, message: str, status: int = 404):
        super().__init__(message)
        self.status = status

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


@dataclass
class Epoch:
    """Counts of one epoch: audits, disagreements, gold-labelled audits, and the two bounded sums."""

    index: int
    level: float
    audits: int = 0
    disagreements: int = 0
    gold: int = 0
    upper_sum: int = 0  # sum of z (regret where gold is known, else disagreement)
    lower_sum: int = 0  # sum of y (regret where gold is known, else 0)
    held: bool = False  # the upper bound was <= alpha at some audit of this epoch
    refuted: bool = False  # the z rate (what the upper bound bounds) was shown > alpha: it cannot hold
    exceeded: bool = False  # the lower bound on the regret was > alpha at some audit of this epoch

    def bounds(self) -> tuple[float, float]:
        """(upper bound on the regret rate, lower bound) of this epoch, at its level."""
        return upper_bound(self.upper_sum, self.audits, self.level), lower_bound(self.lower_sum, self.audits, self.level)

    def verdict(self, alpha: float) -> str | None:
        """The epoch's own status from the tests at alpha, None while undecided. Each finding stays for the rest of
        the epoch (the tests are valid at all times at once, so their running intersection is too: no flicker);
        the later, more pessimistic finding wins (violated > unproven because refuted > holding)."""
        self.exceeded = self.exceeded or bool(self.gold and above(self.lower_sum, self.audits, alpha, self.level))
        self.refuted = self.refuted or bool(above(self.upper_sum, self.audits, alpha, self.level))
        self.held = self.held or bool(below(self.upper_sum, self.audits, alpha, self.level))
        return VIOLATED if self.exceeded else UNPROVEN if self.refuted else HOLDING if self.held else None


@dataclass
class _Audit:
    epoch: Epoch
    disagree: bool
    regret: bool | None = None


@dataclass
class AuditMonitor:
    """Thread-safe state of the live statement for one router (see the module docstring)."""

    alpha: float
    reference: str
    router: str = "router"
    delta: float = 0.05
    window: int = 0
    history: deque = field(default_factory=lambda: deque(maxlen=HISTORY_ROWS), repr=False)  # the newest statuses

    def __post_init__(self):
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not 0 < self.alpha < 1:
            raise ConfigError(f"The audit's `alpha` (the certificate's risk limit) must be in (0, 1). Got {self.alpha!r}.")
        check_level(self.delta)
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 0:
            raise ConfigError(f"The `audit_window` parameter must be an integer >= 0 (0: no epochs). Got {self.window!r}.")
        self._lock = threading.Lock()
        self._audits: OrderedDict[str, _Audit] = OrderedDict()
        self.epoch, self.previous = self._new_epoch(1), None
        self.skipped = self.failed = 0
        self.status = UNPROVEN

    def _new_epoch(self, k: int) -> Epoch:
        return Epoch(k, self.delta * 6 / (math.pi**2 * k**2) if self.window else self.delta)

    # ----- observations ---------------------------------------------------------------------------------------
    def record(self, request_id: str, agree: bool, when: float | None = None) -> str:
        """Count one finished audit; returns the status after it."""
        with self._lock:
            if self.window and self.epoch.audits >= self.window:
                self.previous = self._verdict(self.epoch) or UNPROVEN  # holding must be earned again every epoch
                self.epoch = self._new_epoch(self.epoch.index + 1)
            ep = self.epoch
            audit = _Audit(ep, not agree)
            ep.audits += 1
            ep.disagreements += int(not agree)
            ep.upper_sum += int(not agree)
            self._audits[request_id] = audit
            while len(self._audits) > MAX_REMEMBERED:
                self._audits.popitem(last=False)
            return self._update(when)

    def feedback(self, request_id: str, regret: bool, when: float | None = None) -> str:
        """Gold for an audited request: `regret` = reference right and routed wrong. Returns the status."""
        with self._lock:
            audit = self._audits.get(request_id)
            if audit is None:
                raise FeedbackError(f"No audit is remembered for request id {request_id!r}: only audited requests "
                                    "(response header x-routedvlm-audited: 1) take gold feedback, and only the "
                                    f"{MAX_REMEMBERED} most recent ones.")
            if audit.regret is not None:
                raise FeedbackError(f"Request {request_id!r} already has gold feedback; it is counted once.", 409)
            self._apply_gold(audit, bool(regret))
            return self._update(when)

    def count_skipped(self) -> None:
        with self._lock:
            self.skipped += 1

    def count_failed(self, request_id: str) -> None:
        with self._lock:
            self.failed += 1

    @staticmethod
    def _apply_gold(audit: _Audit, regret: bool) -> None:
        if regret and not audit.disagree:
            raise InputError("Gold feedback says the reference was right and the routed answer wrong, but the two "
                             "answers agree; check the correctness values sent.")
        audit.regret, ep = regret, audit.epoch
        ep.gold += 1
        ep.upper_sum += int(regret) - int(audit.disagree)
        ep.lower_sum += int(regret)
        ep.refuted = False  # z was revised down: re-examined on the counts as they are now

    # ----- the statement --------------------------------------------------------------------------------------
    def _verdict(self, ep: Epoch) -> str:
        return ep.verdict(self.alpha)

    def _update(self, when) -> str:
        status = self._verdict(self.epoch) or self.previous or UNPROVEN
        if status != self.status:
            upper, lower = self.epoch.bounds()
            logger.warning("audit status of router %s: %s -> %s (upper bound %.4f, lower bound %.4f, alpha %.4f, "
                           "%d audits in epoch %d)", self.router, self.status, status, upper, lower,
                           self.alpha, self.epoch.audits, self.epoch.index)
            self.status = status
        ep = self.epoch
        self.history.append({"time": time.time() if when is None else when, "audits": self.audits, "epoch": ep.index,
                             "epoch_audits": ep.audits, "disagreements": ep.disagreements, "gold": ep.gold,
                             "upper_sum": ep.upper_sum, "lower_sum": ep.lower_sum, "level": ep.level,
                             "status": status})
        return status

    @property
    def audits(self) -> int:
        return (self.epoch.index - 1) * self.window + self.epoch.audits if self.window else self.epoch.audits

    def snapshot(self) -> dict:
        """What /health and /metrics show."""
        with self._lock:
            ep = self.epoch
            upper, lower = ep.bounds()
            return {"router": self.router, "reference": self.reference, "status": self.status, "alpha": self.alpha,
                    "delta": self.delta, "window": self.window, "audits": self.audits, "skipped": self.skipped,
                    "failed": self.failed, "epoch": ep.index, "epoch_audits": ep.audits,
                    "disagreement_rate": ep.disagreements / ep.audits if ep.audits else None,
                    "gold": ep.gold, "upper_bound": upper, "lower_bound": lower,
                    "bound_on": "regret" if ep.gold else "disagreement",
                    "gold_free_upper_bound": upper_bound(ep.disagreements, ep.audits, ep.level)}
