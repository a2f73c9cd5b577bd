"""A technique that overrides every hook of the contract, answers as if it were absent (no reward term, no
mask, no weights, no loss term) and records the order in which the module and the rollout callback call it.
It is also the run's advantage estimator (signed, as ``SignedAdvantages``): ``compute_advantages`` is a hook
of exactly one technique."""

from __future__ import annotations

import torch
from typing_extensions import override

from lite_ppo.technique import Technique


class HookRecorder(Technique):
    calls: list[str] = []  # every hook call of the fit, in order (one fit per process at a time)

    def _called(self, name: str) -> None:
        HookRecorder.calls.append(name)

    @override
    def configure_run(self, settings):
        self._called("configure_run")

    @override
    def shape_rewards(self, ctx, batch):
        self._called("shape_rewards")

    @override
    def on_rollout(self, ctx, batch):
        self._called("on_rollout")

    @override
    def keep_groups(self, ctx, batch):
        self._called("keep_groups")

    @override
    def compute_advantages(self, ctx, batch):
        self._called("compute_advantages")
        return torch.where(batch.response_ids[:, 0] % 2 == 0, 1.0, -1.0)

    @override
    def loss_mask(self, ctx, batch):
        self._called("loss_mask")

    @override
    def token_weights(self, ctx, batch):
        self._called("token_weights")

    @override
    def policy_mask(self, ctx, batch):
        self._called("policy_mask")

    @override
    def before_update(self, ctx, batch):
        self._called("before_update")

    @override
    def configure_loss(self, config):
        self._called("configure_loss")
        return {}

    @override
    def extra_loss_terms(self, ctx, minibatch):
        self._called("extra_loss_terms")
        return {}

    @override
    def observe_old_logprobs(self, ctx, batch):
        self._called("observe_old_logprobs")

    @override
    def on_update_end(self, ctx, batch, stats):
        self._called("on_update_end")

    @override
    def on_phase(self, trainer, module):
        self._called("on_phase")
