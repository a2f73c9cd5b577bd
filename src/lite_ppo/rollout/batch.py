"""The tensors of one rollout step, shared by the rollout callback, the techniques and the module."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch


@dataclass
class RolloutBatch:
    """G responses for each of N prompts on this rank, laid out for one forward pass.

    Shapes (B = N * G responses, P = padded prompt width, R = padded response width):

    - ``input_ids`` [B, P + R]: prompt left-padded to P, then response right-padded to R.
    - ``attention_mask`` [B, P + R]: 1 on real prompt and response tokens.
    - ``response_mask`` [B, R]: 1 on generated tokens (EOS included when it was generated).
    - ``loss_mask`` [B, R]: tokens that enter the policy loss; starts as ``response_mask`` and
      techniques (overlong filtering) may zero rows of it after advantages are computed.
    - ``group_ids`` [B]: index of the prompt a response answers; a group never straddles ranks.
    - ``rewards`` [B] float, ``truncated`` [B] bool (hit max tokens without EOS),
      ``response_lengths`` [B] long.
    - ``reward_status``: one status per response (``lite_ppo.rewards.STATUSES``: ``correct``,
      ``wrong``, ``no_answer``, ...), or None for a batch built without a verifier.
    - ``correct`` [B] bool: the verifier's verdict (the reward's status was ``correct``). Reward
      shaping edits ``rewards``, never this, so it is what techniques and diagnostics that ask
      "was this response right?" read. A batch built without a verifier verdict (tests, hand-made
      batches) counts ``rewards > 0.5`` as correct.
    - ``advantages`` [B] (one value per response) once an estimator has run, or [B, R] (one per
      token, 0 off the response) from an estimator with ``per_token_advantages``.
    - ``old_logprobs`` [B, R]: log pi_old of the sampled tokens, computed once by the module.
    - ``engine_logprobs`` [B, R] or None: the rollout engine's own log-probs, for drift diagnostics.
    - ``token_weights`` [B, R] or None: per-token weights multiplying the surrogate loss (e.g. a
      truncated importance-sampling correction); None means 1.
    - ``old_entropy`` [B, R] or None: each token's entropy under pi_old (at the sampling
      temperature), computed with the old log-probs when a technique asks for it
      (``Technique.needs_old_entropy``).
    - ``policy_mask`` [B, R] or None: the tokens the policy loss is averaged over, within
      ``loss_mask`` (e.g. the high-entropy tokens); None means all of ``loss_mask``.
    - ``temperature``: the sampling temperature; the trainer's log-probs are those of
      softmax(logits / temperature), the distribution the responses were sampled from.
    - ``extras``: per-response python lists for display and reports (``tier``, ``prompt_text``,
      ``response_text``, ``answer``, ``extracted``).

    Hooks receive the batch read-only; the module and the rollout callback build new batches with
    :func:`dataclasses.replace` from what the hooks return (``lite_ppo.technique``).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    group_ids: torch.Tensor
    rewards: torch.Tensor
    truncated: torch.Tensor
    response_lengths: torch.Tensor
    correct: torch.Tensor | None = None
    reward_status: list[str] | None = None
    loss_mask: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    old_logprobs: torch.Tensor | None = None
    engine_logprobs: torch.Tensor | None = None
    token_weights: torch.Tensor | None = None
    old_entropy: torch.Tensor | None = None
    policy_mask: torch.Tensor | None = None
    temperature: float = 1.0
    extras: dict[str, list[Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.loss_mask is None:
            self.loss_mask = self.response_mask.clone()
        if self.correct is None:
            self.correct = self.rewards.detach() > 0.5

    @property
    def num_responses(self) -> int:
        return self.input_ids.shape[0]

    @property
    def policy_loss_mask(self) -> torch.Tensor:
        """[B, R] the tokens the policy loss is averaged over: ``loss_mask`` times ``policy_mask``."""
        if self.policy_mask is None:
            return self.loss_mask
        return self.loss_mask * self.policy_mask.to(self.loss_mask.dtype)

    @property
    def prompt_width(self) -> int:
        return self.input_ids.shape[1] - self.response_mask.shape[1]

    @property
    def response_ids(self) -> torch.Tensor:
        """[B, R] the generated token ids (padding where ``response_mask`` is 0)."""
        return self.input_ids[:, self.prompt_width :]

    def select(self, index: torch.Tensor) -> RolloutBatch:
        """Rows ``index`` (a 1-D long tensor) of every per-response field, in that order."""
        index = index.to(self.input_ids.device)
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, torch.Tensor):
                out[f.name] = value[index]
            elif f.name == "extras":
                idx = index.tolist()
                out[f.name] = {k: [v[i] for i in idx] for k, v in value.items()}
            elif f.name == "reward_status" and value is not None:
                out[f.name] = [value[i] for i in index.tolist()]
            else:
                out[f.name] = value
        return replace(self, **out)

    def to(self, device: torch.device | str) -> RolloutBatch:
        out = {
            f.name: getattr(self, f.name).to(device)
            for f in fields(self)
            if isinstance(getattr(self, f.name), torch.Tensor)
        }
        return replace(self, **out)

    @staticmethod
    def concat(batches: list[RolloutBatch], pad_token_id: int) -> RolloutBatch:
        """Stack batches whose prompt and response widths may differ (re-pads both sides).

        Group ids are offset so that groups of different batches stay distinct.
        """
        if len(batches) == 1:
            return batches[0]
        p_width = max(b.prompt_width for b in batches)
        r_width = max(b.response_mask.shape[1] for b in batches)
        parts: dict[str, list[torch.Tensor]] = {}
        extras: dict[str, list[Any]] = {}
        statuses: list[str] | None = [] if all(b.reward_status is not None for b in batches) else None
        group_offset = 0
        for b in batches:
            dp, dr = p_width - b.prompt_width, r_width - b.response_mask.shape[1]
            pad_seq = lambda t, value, dp=dp, dr=dr: torch.nn.functional.pad(t, (dp, dr), value=value)  # noqa: E731
            pad_resp = lambda t, value, dr=dr: torch.nn.functional.pad(t, (0, dr), value=value)  # noqa: E731
            parts.setdefault("input_ids", []).append(pad_seq(b.input_ids, pad_token_id))
            parts.setdefault("attention_mask", []).append(pad_seq(b.attention_mask, 0))
            per_token = ("response_mask", "loss_mask", "old_logprobs", "engine_logprobs", "token_weights")
            for name in (*per_token, "old_entropy", "policy_mask"):
                value = getattr(b, name)
                if value is not None:
                    parts.setdefault(name, []).append(pad_resp(value, 0))
            parts.setdefault("group_ids", []).append(b.group_ids + group_offset)
            group_offset += int(b.group_ids.max().item()) + 1 if b.num_responses else 0
            for name in ("rewards", "truncated", "response_lengths", "correct", "advantages"):
                value = getattr(b, name)
                if value is not None:
                    parts.setdefault(name, []).append(value)
            for k, v in b.extras.items():
                extras.setdefault(k, []).extend(v)
            if statuses is not None:
                statuses.extend(b.reward_status)
        merged = {k: torch.cat(v) for k, v in parts.items() if len(v) == len(batches)}
        return RolloutBatch(**merged, reward_status=statuses, temperature=batches[0].temperature, extras=extras)
