"""Verifiable rewards. Rewards know nothing of training or techniques."""

from lite_ppo.rewards.math_verify_reward import STATUSES, MathVerifyReward, RewardResult, status_counts

__all__ = ["STATUSES", "MathVerifyReward", "RewardResult", "status_counts"]
