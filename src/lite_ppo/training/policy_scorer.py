"""Scoring responses with the policy (or another model laid out like it): the forward passes that
the update, the old log-probs and the techniques share.

Tokens are scored at the sampling temperature, padding columns trimmed; with hidden-state scoring
(``model.logprob_chunk_size``) the final hidden states are scored chunk-wise and, with
``model.pack_prompts``, each group's prompt is computed once (``lite_ppo.training.policy_forward``);
otherwise from the model's full logits. The micro-batch plan (``micro_batch_size`` or
``micro_batch_tokens``) is decided here too, since it depends on the packing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from lite_ppo.ops import entropy_from_logits, logprobs_from_logits, split_to_count
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.strategies.ranks import Ranks
from lite_ppo.strategies.zero import deepspeed_strategy
from lite_ppo.training.policy_forward import (
    packs_into_one_row,
    plan_micro_batches,
    response_logprobs,
    supports_hidden_state_scoring,
    trim_padding,
)

if TYPE_CHECKING:  # pragma: no cover
    from lite_ppo.training.module import LitePPO


class PolicyScorer:
    """The scoring service of one :class:`~lite_ppo.training.module.LitePPO`: its policy, tokenizer
    and ``model.*`` settings, read when called (the policy loads after the module is built)."""

    def __init__(self, module: LitePPO) -> None:
        self.module = module

    def forward_logits(self, batch: RolloutBatch, model: torch.nn.Module | None = None) -> torch.Tensor:
        """Logits [b, R, V] predicting each response token, divided by the sampling temperature.

        ``model`` defaults to the policy; techniques pass another one (a KL reference) so that both
        see exactly the same positions and temperature.
        """
        width = batch.response_mask.shape[1]
        # Left-padded prompts: positions count real tokens only, as generate() did.
        position_ids = (batch.attention_mask.cumsum(-1) - 1).clamp(min=0)
        out = (model or self.module.policy)(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=position_ids,
            use_cache=False,
            logits_to_keep=width + 1,
        )
        return out.logits[:, :-1].float() / batch.temperature

    @torch.no_grad()
    def sequence_logprobs(self, batch: RolloutBatch) -> torch.Tensor:
        """log pi(o_t | x, o_<t) of the response tokens with the current policy, no gradient: [B, R]."""
        return self.score_without_gradient(batch, with_entropy=False)[0]

    @torch.no_grad()
    def score_without_gradient(
        self, batch: RolloutBatch, with_entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(logprobs, entropy or None)`` [B, R] with the current policy, no gradient, micro-batch by micro-batch."""
        out = torch.zeros(batch.response_mask.shape, dtype=torch.float32, device=batch.response_mask.device)
        entropy = torch.zeros_like(out) if with_entropy else None
        for rows in self.micro_batch_rows(batch):
            logprobs, micro_entropy = self.score_responses(batch.select(rows), with_entropy=with_entropy)
            out[rows.to(out.device)] = logprobs
            if entropy is not None:
                entropy[rows.to(out.device)] = micro_entropy.float()
        return out, entropy

    def score_responses(
        self, batch: RolloutBatch, model: torch.nn.Module | None = None, with_entropy: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logprobs, entropy)`` [b, R] of the response tokens at the sampling temperature, with
        gradients when enabled, 0 off ``response_mask`` (entropy 0 when not ``with_entropy``).

        Padding columns are trimmed first; with :meth:`uses_hidden_states`, groups are packed
        (``pack_prompts``) and tokens scored chunk-wise from the final hidden states
        (``lite_ppo.training.policy_forward``), else the model's full logits are used (:meth:`forward_logits`).
        ``model`` defaults to the policy; techniques pass a reference model.
        """
        model = model or self.module.policy
        trimmed = trim_padding(batch)
        if self.uses_hidden_states(model):
            chunk = self.module.hparams.logprob_chunk_size
            pad_id = (
                self.module.tokenizer.pad_token_id
                if self.module.tokenizer is not None and self.module.tokenizer.pad_token_id is not None
                else 0
            )
            logprobs, entropy = response_logprobs(
                model,
                trimmed,
                pack=self.packs_prompts(model),
                chunk_size=chunk,
                with_entropy=with_entropy,
                pad_token_id=pad_id,
            )
        else:
            logits = self.forward_logits(trimmed, model)
            logprobs = logprobs_from_logits(logits, trimmed.response_ids) * trimmed.response_mask
            entropy = (
                entropy_from_logits(logits) * trimmed.response_mask if with_entropy else torch.zeros_like(logprobs)
            )
        pad = batch.response_mask.shape[1] - trimmed.response_mask.shape[1]  # back to the batch's width
        return torch.nn.functional.pad(logprobs, (0, pad)), torch.nn.functional.pad(entropy, (0, pad))

    def uses_hidden_states(self, model: torch.nn.Module) -> bool:
        """Whether tokens are scored from hidden states (chunked, packable): on unless
        ``logprob_chunk_size`` is None, for models whose logits are a plain linear head."""
        return self.module.hparams.logprob_chunk_size is not None and supports_hidden_state_scoring(model)

    def packs_prompts(self, model: torch.nn.Module | None = None) -> bool:
        return self.module.hparams.pack_prompts and self.uses_hidden_states(model or self.module.policy)

    def micro_batch_rows(self, batch: RolloutBatch) -> list[torch.Tensor]:
        """Row indices of each forward pass over ``batch`` (``micro_batch_size`` or ``micro_batch_tokens``)."""
        budget = self.module.hparams.micro_batch_tokens
        rows = plan_micro_batches(
            batch,
            self.module.hparams.micro_batch_size,
            budget,
            pack=self.packs_prompts(),
            one_row=packs_into_one_row(self.module.policy),
        )
        if budget is not None and deepspeed_strategy(self.module._trainer) is not None:
            # ZeRO-3 gathers parameters in every forward, a collective: every rank runs as many passes.
            rows = split_to_count(rows, int(Ranks(self.module._trainer).max(torch.tensor(len(rows)))))
        return rows
