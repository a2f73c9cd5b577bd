"""Rollout data and engines. Engines know nothing of training or techniques."""

from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.rollout.batched import BatchedEngine
from lite_ppo.rollout.engine import Generation, RolloutEngine, SamplingConfig
from lite_ppo.rollout.hf import HFEngine
from lite_ppo.rollout.vllm import VLLMEngine

__all__ = ["BatchedEngine", "Generation", "HFEngine", "RolloutBatch", "RolloutEngine", "SamplingConfig", "VLLMEngine"]
