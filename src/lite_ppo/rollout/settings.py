"""What a run generates with, resolved once at fit start and handed to every technique.

The rollout callback owns the engine and the sampling settings; a technique that needs them (the
generation budget of Dr. GRPO's aggregation, the overlong penalty's max length, whether the engine
reports log-probs) receives a :class:`RunSettings` in ``Technique.configure_run`` instead of
searching ``trainer.callbacks`` for the rollout callback. Any other callback that declares the same
method (:class:`SettingsListener`: the ``Evaluation`` callback sizes its metrics by
``eval_sampling.n``) receives them too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from lite_ppo.rollout.engine import SamplingConfig


@dataclass(frozen=True)
class RunSettings:
    """The rollout settings of one fit.

    - ``sampling`` / ``eval_sampling``: training and validation sampling.
    - ``engine``: the rollout engine's class name (for messages).
    - ``engine_logprobs``: whether the engine reports the sampled tokens' log-probs from weights of
      its own (vLLM), which an importance-sampling correction needs; False for an engine that
      samples with the trainer's policy (HF) or is told not to report them.
    """

    sampling: SamplingConfig
    eval_sampling: SamplingConfig
    engine: str
    engine_logprobs: bool

    @property
    def max_new_tokens(self) -> int:
        """The training generation budget (tokens per response)."""
        return int(self.sampling.max_new_tokens)


@runtime_checkable
class SettingsListener(Protocol):
    """A callback handed the run's :class:`RunSettings` once, at setup, after every callback's own
    ``setup`` (``LitePPO.setup`` calls it, in callback order). Every technique is one
    (``Technique.configure_run``, a no-op by default)."""

    def configure_run(self, settings: RunSettings) -> None: ...
