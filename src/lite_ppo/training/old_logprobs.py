"""log pi_old of one update: where they come from, and each micro-batch's share of them.

Three sources (``model.old_logprobs``):

- ``recompute``: one no-gradient pass over every response before the first optimizer step (also
  chosen whenever a technique needs them all up front: one that overrides ``token_weights``,
  ``policy_mask`` or ``before_update``, or sets ``needs_old_entropy``);
- ``reuse_first`` (default, exact): the first mini-batch's from its own forward pass in the first
  optimizer step (the policy has not moved yet, so its ratio is exactly 1), the other rows from
  one no-gradient pass before the update;
- ``engine``: the rollout engine's, no pass at all; checked against the trainer's on the first
  micro-batch, and the step falls back to ``reuse_first`` (with a warning) when they drift further
  than the tolerance.

:class:`OldLogprobs` is made per training step: :meth:`before_update` says what is known before
the first optimizer step, :meth:`of_micro` gives every micro-batch of the update its old log-probs,
and :attr:`values` is the whole [B, R] tensor once the first optimizer step is done.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from lite_ppo import metric_names as names
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.step_metrics import StepMetrics

OldLogprobSource = Literal["engine", "recompute", "reuse_first"]
OLD_LOGPROB_SOURCES = ("reuse_first", "recompute", "engine")

# (logprobs [B, R], entropy [B, R] or None) of a batch under the current policy, no gradient
Scorer = Callable[[RolloutBatch, bool], tuple[torch.Tensor, "torch.Tensor | None"]]


@dataclass
class OldLogprobs:
    """The old log-probs of one training step's ``rollout``.

    Args:
        rollout: the step's batch (its ``response_mask`` and, for ``engine``, ``engine_logprobs``).
        source: where they come from (:func:`choose_source`).
        later_rows: the rows after the first mini-batch (None with one mini-batch).
        score: scores a batch with the current policy, no gradient (``(logprobs, entropy or None)``).
        global_sum: sums a tensor over ranks (the engine check's drift is global).
        tolerance: largest mean |log pi_trainer - log pi_engine| per token for ``engine``.
        metrics: the step's scalars (the engine's measured drift).
        warn: says why the step falls back from ``engine`` (rank zero only).
    """

    rollout: RolloutBatch
    source: OldLogprobSource
    later_rows: torch.Tensor | None
    score: Scorer
    global_sum: Callable[[torch.Tensor], torch.Tensor]
    tolerance: float
    metrics: StepMetrics
    warn: Callable[[str], None]

    def __post_init__(self) -> None:
        self._values: torch.Tensor | None = None  # [B, R] once known
        # Seconds of old-log-prob passes run inside the update (the engine fallback's): the module
        # counts them as old log-probs, not as update.
        self.seconds_in_update = 0.0
        self._from_first_step = self.source == "reuse_first"  # whether the first step's forwards fill rows

    def before_update(self, with_entropy: bool) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """What is known before the first optimizer step: ``(old log-probs [B, R] or None, pi_old's
        entropy [B, R] or None)``. All of them under ``recompute`` and ``engine``; None under
        ``reuse_first``, whose first mini-batch comes from its own forward (the later rows are
        scored now). The entropy only under ``recompute`` with ``with_entropy``."""
        rollout = self.rollout
        if self.source == "engine":
            self._values = rollout.engine_logprobs * rollout.response_mask
            return self._values, None
        if self.source == "recompute":
            self._values, entropy = self.score(rollout, with_entropy)
            return self._values, entropy
        self._values = torch.full(rollout.response_mask.shape, torch.nan, device=rollout.response_mask.device)
        if self.later_rows is not None:
            self._values[self.later_rows] = self.score(rollout.select(self.later_rows), False)[0]
        return None, None

    def of_micro(
        self, micro: RolloutBatch, rows: torch.Tensor, logprobs: torch.Tensor, first_step: bool, first_micro: bool
    ) -> torch.Tensor:
        """The old log-probs [b, R] of ``micro`` (``rows`` of the rollout), whose forward under the
        current policy gave ``logprobs``. In the first optimizer step the policy has not moved since
        the rollout: under ``reuse_first`` they are this forward's (recorded for :attr:`values`);
        under ``engine`` the first micro-batch checks the engine's against them first."""
        if first_step and first_micro and self.source == "engine":
            self._check_engine(micro, logprobs)
        if first_step and self._from_first_step:
            old = logprobs.detach() * micro.response_mask
            self._values[rows] = old
            return old
        return self._values[rows.to(self._values.device)]

    @property
    def values(self) -> torch.Tensor:
        """Every old log-prob [B, R] (complete once the first optimizer step has run)."""
        return self._values

    def _check_engine(self, micro: RolloutBatch, logprobs: torch.Tensor) -> None:
        """Keep the engine's log-probs when they match the trainer's on this micro-batch (on every
        rank), else fall back to ``reuse_first`` with a warning: the rows after the first
        mini-batch get their no-gradient pass now, while the policy has still not moved."""
        mask = micro.response_mask
        drift = self.global_sum(
            torch.stack([((logprobs.detach() - micro.engine_logprobs).abs() * mask).sum(), mask.sum()])
        )
        mean_drift = float(drift[0] / drift[1].clamp(min=1))
        # The old log-probs are then the engine's, so a drift diagnostic comparing the two reads 0:
        # this is the measured gap (one value, already global).
        self.metrics.mean(names.ENGINE_LOGPROB_DRIFT, mean_drift, 1)
        if mean_drift <= self.tolerance:
            return
        self.warn(
            f"model.old_logprobs=engine: the engine's log-probs differ from the trainer's by {mean_drift:.2e} "
            f"nats per token (> engine_logprob_tolerance={self.tolerance:g}); this step uses the trainer's own"
        )
        self._from_first_step = True
        if self.later_rows is not None:
            start = time.perf_counter()
            self._values[self.later_rows] = self.score(self.rollout.select(self.later_rows), False)[0]
            self.seconds_in_update += time.perf_counter() - start


def choose_source(
    wanted: OldLogprobSource, needs_all_up_front: bool, engine_reports: bool
) -> tuple[OldLogprobSource, str | None]:
    """``model.old_logprobs``, or ``recompute`` when a technique needs them all before the update,
    or ``reuse_first`` when ``engine`` is asked of an engine that reports none (with the reason)."""
    if wanted != "recompute" and needs_all_up_front:
        return "recompute", None
    if wanted == "engine" and not engine_reports:
        return "reuse_first", "model.old_logprobs=engine: the rollout engine reports no log-probs; using reuse_first"
    return wanted, None


class OldLogprobPolicy:
    """``model.old_logprobs`` over a whole fit: each step's :class:`OldLogprobs`, its source chosen
    by :func:`choose_source`, and the reason for a fallback from ``engine`` said once per fit.

    Args:
        wanted: ``model.old_logprobs``.
        tolerance: ``model.engine_logprob_tolerance``.
        warn: says why a step falls back (rank zero only), and why ``engine`` cannot be used.
    """

    def __init__(self, wanted: OldLogprobSource, tolerance: float, warn: Callable[[str], None]) -> None:
        self.wanted, self.tolerance, self.warn = wanted, tolerance, warn
        self._said_why = False

    def for_step(
        self,
        rollout: RolloutBatch,
        needs_all_up_front: bool,
        later_rows: torch.Tensor | None,
        score: Scorer,
        global_sum: Callable[[torch.Tensor], torch.Tensor],
        metrics: StepMetrics,
    ) -> OldLogprobs:
        """The step's old log-probs: ``wanted``, or ``recompute`` when a technique needs them all before
        the update (``needs_all_up_front``); ``later_rows`` are the rows after the first mini-batch."""
        source, why = choose_source(self.wanted, needs_all_up_front, engine_reports=rollout.engine_logprobs is not None)
        if why is not None and not self._said_why:
            self.warn(why)
            self._said_why = True
        return OldLogprobs(rollout, source, later_rows, score, global_sum, self.tolerance, metrics, self.warn)
