"""The rollout engine interface: turn prompt token ids into sampled responses.

Engines know nothing of training or techniques. The rollout callback owns one engine, calls
``setup`` once (lazily, at the first rollout), ``sync_weights`` whenever the policy changed, and
``generate`` for every rollout batch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass
class SamplingConfig:
    """Sampling settings, mapped one-to-one onto every engine.

    Paper defaults (docs/method.md, "Training settings"): temperature 0.99, top_p 0.99, top_k 100.
    ``greedy=True`` ignores temperature/top_p/top_k and takes the arg-max token.
    ``top_k <= 0`` disables top-k; ``top_p >= 1`` disables nucleus sampling.
    """

    n: int = 8
    temperature: float = 0.99
    top_p: float = 0.99
    top_k: int = 100
    max_new_tokens: int = 8192
    greedy: bool = False

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"SamplingConfig.n must be >= 1, got {self.n}")
        if self.max_new_tokens < 1:
            raise ValueError(f"SamplingConfig.max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not self.greedy and self.temperature <= 0:
            raise ValueError(f"SamplingConfig.temperature must be > 0 when sampling, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingConfig.top_p must be in (0, 1], got {self.top_p}")


@dataclass
class Generation:
    """One sampled response.

    ``token_ids`` are exactly the generated ids (EOS included when generated; no padding, no
    decode/re-encode round trip). ``finished`` is True when the engine stopped on EOS, False when it
    hit ``max_new_tokens`` (truncated). ``logprobs`` are the engine's log-probs of those tokens, or
    None when the engine does not report them.
    """

    token_ids: list[int]
    finished: bool
    logprobs: list[float] | None = None

    @property
    def truncated(self) -> bool:
        return not self.finished


class RolloutEngine(ABC):
    """Generates responses for a list of tokenized prompts.

    Subclasses: :class:`lite_ppo.rollout.hf.HFEngine` (transformers ``generate``, portable) and
    :class:`lite_ppo.rollout.vllm.VLLMEngine`.

    ``on_tokens``, when set (a progress display sets it), is told how many response tokens each
    decoding step added, while ``generate`` runs. An engine that cannot report during generation
    (vLLM's offline ``generate``) never calls it.
    """

    on_tokens: Callable[[int], None] | None = None

    def setup(self, policy: torch.nn.Module, tokenizer, model_path: str) -> None:
        """Called once before the first ``generate``. ``policy`` is the live training model."""
        return None  # optional hook: the default does nothing

    @abstractmethod
    def generate(
        self, prompt_token_ids: list[list[int]], sampling: SamplingConfig, seed: int | None = None
    ) -> list[list[Generation]]:
        """Return ``sampling.n`` generations for every prompt, in prompt order."""

    def sync_weights(self, policy: torch.nn.Module) -> None:
        """Make the engine generate with ``policy``'s current weights (no-op when it shares them)."""
        return None  # optional hook: the default does nothing

    @property
    def shares_policy_weights(self) -> bool:
        """True when the engine generates with the training module itself (no sync needed)."""
        return False

    def close(self) -> None:
        """Release the engine's resources."""
        return None  # optional hook: the default does nothing


def eos_token_ids(policy: torch.nn.Module, tokenizer) -> list[int]:
    """The ids that end a response: the generation config's EOS ids (instruct models often list
    several, e.g. ``<|im_end|>`` and ``<|endoftext|>``), plus the tokenizer's own EOS."""
    config_eos = getattr(getattr(policy, "generation_config", None), "eos_token_id", None)
    ids = list(config_eos) if isinstance(config_eos, (list, tuple)) else [config_eos] if config_eos is not None else []
    eos = getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else None
    if eos is not None and eos not in ids:
        ids.append(eos)
    if not ids:
        raise ValueError(
            "the model has no EOS token (neither generation_config.eos_token_id nor tokenizer.eos_token_id)"
        )
    return ids
