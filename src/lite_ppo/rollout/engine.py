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


class LivePolicyEngine(RolloutEngine):
    """An engine that samples with the training policy itself (nothing to sync): it holds the policy and
    tokenizer, puts the policy in eval mode for ``generate`` and hands it the prompts in chunks of
    :meth:`prompts_per_call`. Subclasses decode one chunk in :meth:`_generate_chunk`."""

    _policy: torch.nn.Module | None = None
    _tokenizer = None

    @property
    def shares_policy_weights(self) -> bool:
        return True

    def setup(self, policy: torch.nn.Module, tokenizer, model_path: str) -> None:
        self._policy = policy
        self._tokenizer = tokenizer

    def prompts_per_call(self, sampling: SamplingConfig) -> int:
        """How many prompts one :meth:`_generate_chunk` call decodes."""
        raise NotImplementedError

    def _generate_chunk(self, prompts: list[list[int]], sampling: SamplingConfig, eos_ids: list[int]):
        raise NotImplementedError

    def generate(
        self, prompt_token_ids: list[list[int]], sampling: SamplingConfig, seed: int | None = None
    ) -> list[list[Generation]]:
        if self._policy is None:
            raise RuntimeError(f"{type(self).__name__}.generate called before setup()")
        if seed is not None:
            torch.manual_seed(seed)
        eos_ids = eos_token_ids(self._policy, self._tokenizer)
        size = self.prompts_per_call(sampling)
        out: list[list[Generation]] = []
        was_training = self._policy.training
        self._policy.eval()
        try:
            for start in range(0, len(prompt_token_ids), size):
                out.extend(self._generate_chunk(prompt_token_ids[start : start + size], sampling, eos_ids))
        finally:
            self._policy.train(was_training)
        return out

    def _pad_id(self, eos_ids: list[int]) -> int:
        return self._tokenizer.pad_token_id if self._tokenizer.pad_token_id is not None else eos_ids[0]

    def _left_padded(self, prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(input_ids, attention_mask)`` [prompts, width] on the policy's device, left-padded: every
        response starts at column ``width``."""
        device = next(self._policy.parameters()).device
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long, device=device)
        attention_mask = torch.zeros_like(input_ids)
        for row, ids in enumerate(prompts):
            input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention_mask[row, width - len(ids) :] = 1
        return input_ids, attention_mask


def with_greedy_copies(group: list[Generation], sampling: SamplingConfig) -> list[Generation]:
    """Greedy samples are identical, so engines decode one per prompt: here the ``n - 1`` copies."""
    if not sampling.greedy:
        return group
    return group + [Generation(list(group[0].token_ids), group[0].finished) for _ in range(sampling.n - 1)]
