"""The technique callbacks (one per file) and the rollout callback. Shipped as ``lite_ppo.callbacks``."""

from lite_ppo.callbacks.loss_aggregation import LossAggregation
from lite_ppo.callbacks.normalization import AdvantageNormalization
from lite_ppo.callbacks.rollout import Rollout

__all__ = ["AdvantageNormalization", "LossAggregation", "Rollout"]
