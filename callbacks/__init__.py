"""The technique callbacks (one per file) and the rollout callback. Shipped as ``lite_ppo.callbacks``."""

from lite_ppo.callbacks.advisor import TechniqueAdvisor
from lite_ppo.callbacks.clip_higher import ClipHigher
from lite_ppo.callbacks.console import ConsoleProgressBar
from lite_ppo.callbacks.diagnostics import Diagnostics
from lite_ppo.callbacks.dynamic_sampling import DynamicSampling
from lite_ppo.callbacks.evaluation import Evaluation
from lite_ppo.callbacks.importance_sampling import TruncatedImportanceSampling
from lite_ppo.callbacks.kl import KLPenalty
from lite_ppo.callbacks.logprob_drift import LogprobDrift
from lite_ppo.callbacks.loss_aggregation import LossAggregation
from lite_ppo.callbacks.normalization import AdvantageNormalization
from lite_ppo.callbacks.overlong_filter import OverlongFilter
from lite_ppo.callbacks.overlong_shaping import OverlongRewardShaping
from lite_ppo.callbacks.rollout import Rollout

__all__ = [
    "AdvantageNormalization",
    "ClipHigher",
    "ConsoleProgressBar",
    "Diagnostics",
    "DynamicSampling",
    "Evaluation",
    "KLPenalty",
    "LogprobDrift",
    "LossAggregation",
    "OverlongFilter",
    "OverlongRewardShaping",
    "Rollout",
    "TechniqueAdvisor",
    "TruncatedImportanceSampling",
]
