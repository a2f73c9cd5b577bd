"""Data: problems, their sources (JSONL/Parquet files, synthetic tiers), the DataModule, prompts.

The data package knows nothing of training or techniques.
"""

from lite_ppo.data.jsonl import DataFormatError, load_jsonl_problems, load_parquet_problems, load_problems
from lite_ppo.data.mixture import TierMixture
from lite_ppo.data.problem import Problem
from lite_ppo.data.prompts import DEFAULT_INSTRUCTION, PromptFormatter
from lite_ppo.data.synthetic import TIERS as SYNTHETIC_TIERS
from lite_ppo.data.synthetic import SyntheticSource

__all__ = [
    "DEFAULT_INSTRUCTION",
    "DataFormatError",
    "MathDataModule",
    "Problem",
    "PromptFormatter",
    "SYNTHETIC_TIERS",
    "SyntheticSource",
    "TierMixture",
    "load_jsonl_problems",
    "load_parquet_problems",
    "load_problems",
]


def __getattr__(name: str):
    # Lazy: the DataModule imports Lightning, which `lite-ppo data` and the data files do not need.
    if name == "MathDataModule":
        from lite_ppo.data.datamodule import MathDataModule

        return MathDataModule
    raise AttributeError(f"module 'lite_ppo.data' has no attribute {name!r}")
