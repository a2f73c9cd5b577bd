"""Dynamic sampling (DAPO): drop groups whose responses are all correct or all wrong (the paper's technique 5)."""

from __future__ import annotations

from typing import Literal

import torch
from typing_extensions import override

from lite_ppo.ops.dynamic_sampling import mixed_group_mask
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.step_context import StepContext
from lite_ppo.technique import Technique


class DynamicSampling(Technique):
    """Keeps only the groups (all G responses of one prompt) whose responses disagree.

    A group whose responses are all correct or all wrong gets zero advantage under group centring,
    so it only dilutes the batch. ``keep_groups`` returns the mask of responses in mixed groups; the
    rollout callback drops the rest and generates more prompts until the batch is full again or its
    refill budget is spent (it logs the rounds and the dropped share, and warns when it cannot fill).

    Args:
        metric: what "all the same" is judged on.
            ``correct`` (DAPO's accuracy): the verifier's verdict, ``RolloutBatch.correct``, so
            reward shaping (e.g. the overlong penalty) does not make an all-wrong group look mixed.
            ``reward``: the (possibly shaped) rewards themselves; a group is dropped when all its
            rewards are equal.

    Example (DAPO)::

        trainer:
          callbacks:
            - class_path: lite_ppo.callbacks.DynamicSampling
              init_args: {metric: correct}
    """

    def __init__(self, metric: Literal["correct", "reward"] = "correct") -> None:
        if metric not in ("correct", "reward"):
            raise ValueError(f"DynamicSampling.metric must be 'correct' or 'reward', got {metric!r}")
        self.metric = metric

    def scores(self, batch: RolloutBatch) -> torch.Tensor:
        """[B] the per-response values whose equality within a group drops it."""
        if self.metric == "correct":
            return batch.correct.to(batch.rewards.device).float()
        return batch.rewards.float()

    @override
    def keep_groups(self, ctx: StepContext, batch: RolloutBatch) -> torch.Tensor:
        return mixed_group_mask(self.scores(batch), batch.group_ids)
