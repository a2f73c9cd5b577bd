"""Hand-built rollout batches of given rewards, groups and lengths, and the part of a module a technique touches."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.step_context import StepContext
from lite_ppo.step_metrics import StepMetrics


def make_batch(
    rewards, group_ids, lengths, truncated=None, statuses=None, tiers=None, width=None, prompt_width=2
) -> RolloutBatch:
    """A RolloutBatch with right-padded responses of the given lengths (token ids 5, 6, 7, ...)."""
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    lengths = torch.as_tensor(lengths, dtype=torch.long)
    n = rewards.numel()
    width = width or max(1, int(lengths.max()))
    response_mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).float()
    response_ids = (5 + torch.arange(width)).repeat(n, 1) * response_mask.long()
    input_ids = torch.cat([torch.full((n, prompt_width), 3), response_ids], dim=1)
    attention_mask = torch.cat([torch.ones(n, prompt_width, dtype=torch.long), response_mask.long()], dim=1)
    truncated = torch.zeros(n, dtype=torch.bool) if truncated is None else torch.as_tensor(truncated, dtype=torch.bool)
    extras = {}
    if tiers is not None:
        extras["tier"] = list(tiers)
    return RolloutBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        response_mask=response_mask,
        group_ids=torch.as_tensor(group_ids, dtype=torch.long),
        rewards=rewards,
        truncated=truncated,
        response_lengths=lengths,
        correct=torch.tensor([st == "correct" for st in statuses], dtype=torch.bool) if statuses is not None else None,
        extras=extras,
        reward_status=None if statuses is None else list(statuses),
    )


class CaptureModule:
    """The part of a LightningModule a technique touches: logging, the trainer, all_gather."""

    def __init__(self, trainer=None) -> None:
        self.trainer = trainer or SimpleNamespace(world_size=1, global_rank=0, callbacks=[])
        self.logged: dict[str, float] = {}

    def log_dict(self, metrics, **kwargs) -> None:
        self.logged.update({k: float(v) for k, v in metrics.items()})

    def log(self, name, value, **kwargs) -> None:
        self.logged[name] = float(value)

    def all_gather(self, value):  # pragma: no cover - single process
        return value


def step_ctx(trainer=None, module=None, metrics=None) -> StepContext:
    """The ``ctx`` a hook receives, for calling a hook by hand: the step's metrics are ``metrics``, else
    the module's own ``step_metrics`` (as in a run), else fresh ones."""
    if metrics is None:
        metrics = getattr(module, "step_metrics", None)
    return StepContext(trainer, module, StepMetrics() if metrics is None else metrics)
