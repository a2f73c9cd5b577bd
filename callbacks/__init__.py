"""The technique callbacks (one per file) and the rollout callback. Shipped as ``lite_ppo.callbacks``."""

from lite_ppo.callbacks.advisor import TechniqueAdvisor
from lite_ppo.callbacks.cispo import CISPO
from lite_ppo.callbacks.clip_cov import ClipCov
from lite_ppo.callbacks.clip_higher import ClipHigher
from lite_ppo.callbacks.console import ConsoleProgressBar
from lite_ppo.callbacks.diagnostics import Diagnostics
from lite_ppo.callbacks.dynamic_sampling import DynamicSampling
from lite_ppo.callbacks.entropy_bonus import EntropyBonus
from lite_ppo.callbacks.evaluation import Evaluation
from lite_ppo.callbacks.gspo import GSPO
from lite_ppo.callbacks.high_entropy_tokens import HighEntropyTokens
from lite_ppo.callbacks.importance_sampling import TruncatedImportanceSampling
from lite_ppo.callbacks.kl import KLPenalty
from lite_ppo.callbacks.kl_cov import KLCov
from lite_ppo.callbacks.logprob_drift import LogprobDrift
from lite_ppo.callbacks.loss_aggregation import LossAggregation
from lite_ppo.callbacks.normalization import AdvantageNormalization
from lite_ppo.callbacks.overlong_filter import OverlongFilter
from lite_ppo.callbacks.overlong_shaping import OverlongRewardShaping
from lite_ppo.callbacks.reinforce_pp import ReinforcePlusPlus
from lite_ppo.callbacks.rollout import Rollout
from lite_ppo.callbacks.sapo import SAPO

__all__ = [
    "AdvantageNormalization",
    "CISPO",
    "ClipCov",
    "ClipHigher",
    "ConsoleProgressBar",
    "Diagnostics",
    "DynamicSampling",
    "EntropyBonus",
    "Evaluation",
    "GSPO",
    "HighEntropyTokens",
    "KLCov",
    "KLPenalty",
    "LogprobDrift",
    "LossAggregation",
    "OverlongFilter",
    "OverlongRewardShaping",
    "ReinforcePlusPlus",
    "Rollout",
    "SAPO",
    "TechniqueAdvisor",
    "TruncatedImportanceSampling",
]
