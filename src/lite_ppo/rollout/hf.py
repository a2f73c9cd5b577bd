"""Rollouts with transformers ``generate``: the portable engine (CPU, GPU, any HF causal LM)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers.generation.streamers import BaseStreamer

from lite_ppo.rollout.engine import Generation, LivePolicyEngine, SamplingConfig, with_greedy_copies


class HFEngine(LivePolicyEngine):
    """Samples with the training policy itself through ``model.generate``.

    Prompts are batched with left padding, ``n`` samples per prompt; generation stops at EOS or
    ``max_new_tokens`` (then the response is flagged truncated). Because the engine uses the live
    policy there is nothing to sync. It does not report engine log-probs (they would equal the
    trainer's own). With ``on_tokens`` set it reports the tokens of each decoding step as they come.

    Args:
        batch_size: prompts per ``generate`` call (each expands to ``n`` sequences); bounds memory.

    Example::

        engine: {class_path: lite_ppo.rollout.HFEngine, init_args: {batch_size: 16}}
    """

    def __init__(self, batch_size: int = 16) -> None:
        if batch_size < 1:
            raise ValueError(f"HFEngine.batch_size must be >= 1, got {batch_size}")
        self.batch_size = batch_size

    def prompts_per_call(self, sampling: SamplingConfig) -> int:
        return self.batch_size

    @torch.no_grad()
    def _generate_chunk(
        self, prompts: list[list[int]], sampling: SamplingConfig, eos_ids: list[int]
    ) -> list[list[Generation]]:
        pad_id = self._pad_id(eos_ids)
        input_ids, attention_mask = self._left_padded(prompts, pad_id)
        width = input_ids.shape[1]
        # Greedy samples are identical: generate one per prompt and copy it n times.
        per_prompt = 1 if sampling.greedy else sampling.n
        kwargs = dict(
            max_new_tokens=sampling.max_new_tokens,
            num_return_sequences=per_prompt,
            eos_token_id=eos_ids,
            pad_token_id=pad_id,
        )
        if sampling.greedy:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(
                do_sample=True,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                top_k=sampling.top_k if sampling.top_k > 0 else None,
            )
        if self.on_tokens is not None:
            kwargs["streamer"] = _TokenCounter(eos_ids, self.on_tokens)
        sequences = self._policy.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        responses = sequences[:, width:].tolist()
        eos = set(eos_ids)
        result: list[list[Generation]] = []
        for p in range(len(prompts)):
            group = []
            for tokens in responses[p * per_prompt : (p + 1) * per_prompt]:
                end = next((i for i, t in enumerate(tokens) if t in eos), None)
                # generate pads finished rows; cut after the first EOS, keep the EOS itself
                group.append(Generation(tokens[: end + 1], True) if end is not None else Generation(tokens, False))
            result.append(with_greedy_copies(group, sampling))
        return result


class _TokenCounter(BaseStreamer):
    """Reports the response tokens of each decoding step: one per sequence that had not ended
    before it (``generate`` pads a sequence after its EOS; those pads are not tokens of it)."""

    def __init__(self, eos_ids: list[int], report: Callable[[int], None]) -> None:
        self._eos = torch.tensor(eos_ids)
        self._report = report
        self._prompt_seen = False
        self._open: torch.Tensor | None = None  # per sequence: not ended yet

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:  # generate hands over the prompts first
            self._prompt_seen = True
            return
        steps = value.reshape(value.shape[0], -1).cpu()  # (sequences, tokens of this call); on a GPU too
        if self._open is None:
            self._open = torch.ones(steps.shape[0], dtype=torch.bool)
        for column in steps.T:
            added = int(self._open.sum())
            self._open &= ~torch.isin(column, self._eos)
            if added:
                self._report(added)

    def end(self) -> None:
        return None  # nothing buffered
