"""The technique hook contract: the one place that says which RL hooks exist, in which order they
run and what each may change.

A technique is a Lightning ``Callback`` that subclasses :class:`Technique` and overrides some of
the hooks below. The rollout callback and the module call them on every technique in the order the
callbacks are listed in the trainer (YAML order). Built-in techniques (``lite_ppo.callbacks``) use
exactly this contract; a user's technique in their own file does too.

Order within one training step::

    rollout callback:  generate -> score ->  on_rollout      (reward shaping; may edit rewards)
                                          ->  keep_groups     (dynamic sampling; refill loop)
    module:            compute_advantages  (exactly one technique: the advantage estimator)
                       on_advantages       (may edit advantages / loss_mask, e.g. overlong filter)
                       configure_loss      (once, at fit start: clip range, aggregation, ...)
                       old log-probs ->    on_old_logprobs (may set batch.token_weights, e.g. an
                                                            importance-sampling correction)
                       then for every mini-batch:
                           extra_loss_terms (per-token terms added to the loss, e.g. KL)
                       on_update_end       (read-only: diagnostics, logging)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from lightning.pytorch import Callback

from lite_ppo.rollout.batch import RolloutBatch

if TYPE_CHECKING:  # pragma: no cover
    from lightning.pytorch import LightningModule, Trainer


AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")


@dataclass
class PolicyLossConfig:
    """What the clipped surrogate and its aggregation use. Techniques set fields in
    ``configure_loss``; two techniques setting the same field is a configuration error.

    - ``clip_low`` / ``clip_high``: the clip range [1 - clip_low, 1 + clip_high] (docs/method.md).
    - ``dual_clip``: constant c > 1 bounding the loss of negative-advantage tokens, or None.
    - ``aggregation``: ``token-mean`` (L_tok), ``seq-mean-token-mean`` (L_seq) or
      ``seq-mean-token-sum``.
    """

    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float | None = None
    aggregation: str = "token-mean"

    def validate(self) -> None:
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"unknown loss aggregation {self.aggregation!r}; choose one of {AGGREGATIONS}")
        if not 0 <= self.clip_low < 1:
            raise ValueError(f"clip_low must be in [0, 1), got {self.clip_low}")
        if self.clip_high < 0:
            raise ValueError(f"clip_high must be >= 0, got {self.clip_high}")
        if self.dual_clip is not None and self.dual_clip <= 1:
            raise ValueError(f"dual_clip must be > 1, got {self.dual_clip}")


@dataclass
class MiniBatchContext:
    """What ``extra_loss_terms`` sees for one micro-batch.

    ``logprobs`` [b, R] has gradients; ``logits`` [b, R, V] (temperature-scaled) has gradients;
    ``batch`` is the micro-batch (``loss_mask`` says which tokens count).
    """

    batch: RolloutBatch
    logprobs: torch.Tensor
    logits: torch.Tensor


class Technique(Callback):
    """Base class of every RL technique. Override only the hooks you need.

    Example, a length penalty in a user's own file (enable it with ``class_path: my_file.LengthPenalty``
    under ``trainer.callbacks``)::

        class LengthPenalty(Technique):
            def __init__(self, per_token: float = 1e-3):
                self.per_token = per_token

            def on_rollout(self, trainer, module, batch):
                batch.rewards -= self.per_token * batch.response_lengths
                module.log("length_penalty/mean", (self.per_token * batch.response_lengths.float()).mean())
    """

    # -- rollout callback ------------------------------------------------------------------------
    def on_rollout(self, trainer: "Trainer", module: "LightningModule", batch: RolloutBatch) -> None:
        """After rewards are computed. May edit ``batch.rewards`` in place (reward shaping)."""

    def keep_groups(self, trainer: "Trainer", module: "LightningModule", batch: RolloutBatch) -> torch.Tensor | None:
        """Return a bool mask [B] of responses to keep (whole groups), or None to keep all.

        When responses are dropped the rollout callback generates more prompts to refill the batch.
        """
        return None

    # -- module ----------------------------------------------------------------------------------
    def compute_advantages(self, trainer: "Trainer", module: "LightningModule", batch: RolloutBatch) -> torch.Tensor:
        """Return advantages [B] for ``batch``. Exactly one configured technique overrides this."""
        raise NotImplementedError

    def on_advantages(self, trainer: "Trainer", module: "LightningModule", batch: RolloutBatch) -> None:
        """After advantages. May edit ``batch.advantages`` and ``batch.loss_mask`` in place."""

    def on_old_logprobs(self, trainer: "Trainer", module: "LightningModule", batch: RolloutBatch) -> None:
        """After ``batch.old_logprobs`` are computed, before the first optimizer step. May set or
        multiply ``batch.token_weights`` [B, R] (per-token weights of the surrogate loss)."""

    def configure_loss(self, config: PolicyLossConfig) -> dict[str, Any]:
        """Return the fields of ``config`` this technique sets, e.g. ``{"clip_high": 0.28}``."""
        return {}

    def extra_loss_terms(self, trainer: "Trainer", module: "LightningModule", ctx: MiniBatchContext) -> dict[str, torch.Tensor]:
        """Return per-token loss terms [b, R] (coefficient included) added to the policy loss.

        The module aggregates them with the configured aggregation, so they are weighted exactly
        like the surrogate.
        """
        return {}

    def on_update_end(self, trainer: "Trainer", module: "LightningModule", batch: RolloutBatch, stats: dict[str, torch.Tensor]) -> None:
        """After the last optimizer step of the training step. Read-only; log here."""


def techniques_of(trainer: "Trainer") -> list[Technique]:
    """The configured techniques, in callback order."""
    return [cb for cb in trainer.callbacks if isinstance(cb, Technique)]


def overrides(technique: Technique, hook: str) -> bool:
    return getattr(type(technique), hook) is not getattr(Technique, hook)


def advantage_estimator(techniques: list[Technique]) -> Technique:
    """The single technique that computes advantages; a clear error for none or several."""
    found = [t for t in techniques if overrides(t, "compute_advantages")]
    if not found:
        raise ValueError(
            "no advantage estimator is configured: add one technique that computes advantages under "
            "trainer.callbacks, e.g. `class_path: lite_ppo.callbacks.AdvantageNormalization`"
        )
    if len(found) > 1:
        names = " and ".join(type(t).__name__ for t in found)
        raise ValueError(f"conflicting techniques: {names} both compute advantages; keep exactly one")
    return found[0]


def build_loss_config(base: PolicyLossConfig, techniques: list[Technique]) -> PolicyLossConfig:
    """Apply every technique's ``configure_loss`` to a copy of ``base``; two setters of one field conflict."""
    config = PolicyLossConfig(**vars(base))
    owner: dict[str, str] = {}
    for t in techniques:
        for name, value in t.configure_loss(config).items():
            if not hasattr(config, name):
                raise ValueError(f"{type(t).__name__}.configure_loss sets unknown field {name!r}")
            if name in owner:
                raise ValueError(
                    f"conflicting techniques: {owner[name]} and {type(t).__name__} both set the loss's {name!r}; keep one"
                )
            owner[name] = type(t).__name__
            setattr(config, name, value)
    config.validate()
    return config
