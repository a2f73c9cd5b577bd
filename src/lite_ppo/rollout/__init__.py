"""Rollout data and engines. Engines know nothing of training or techniques."""

from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.rollout.engine import Generation, RolloutEngine, SamplingConfig
from lite_ppo.rollout.hf import HFEngine

__all__ = ["Generation", "HFEngine", "RolloutBatch", "RolloutEngine", "SamplingConfig"]
