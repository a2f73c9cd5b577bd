"""Rollouts decoded all together: every sample of a step in one batch over a preallocated KV cache."""

from __future__ import annotations

import torch

from lite_ppo.ops.sampling import sample_next
from lite_ppo.rollout.cached_decoder import CachedDecoder, decoder_stack
from lite_ppo.rollout.engine import Generation, LivePolicyEngine, SamplingConfig, with_greedy_copies

# Finished rows are dropped from the batch once they are a tenth of it: each drop copies the kept
# rows' cache once, and every later step saves their attention and sampling.
_COMPACT_AT = 0.9


class BatchedEngine(LivePolicyEngine):
    """Samples with the live policy, all of a step's sequences decoded together (Llama-family models).

    The prompts are left-padded and prefilled once each; their ``n`` samples share that prefill and
    are decoded side by side, one token per step for the whole batch, over a KV cache allocated once
    (:class:`~lite_ppo.rollout.cached_decoder.CachedDecoder`). Sampling is batched tensor work
    (:mod:`lite_ppo.ops.sampling`: temperature, top-k, top-p as transformers' ``generate`` applies
    them), so a step's Python cost does not grow with the number of sequences. Decoding ends when
    every row has produced an EOS or ``max_new_tokens`` were reached (then the row is truncated).

    Compared with :class:`~lite_ppo.rollout.hf.HFEngine` (any causal LM; keep it for other
    architectures and to time the two side by side): greedy decoding gives the same tokens up to
    rounding-level near-ties, and samples come from the same distribution. The engine also reports
    each sampled token's log-prob at the sampling temperature (before top-k/top-p), the quantity the
    trainer computes, so ``model.old_logprobs: engine`` can use it.

    Args:
        max_sequences: the most sequences decoded at once (prompts x n; bounds the KV cache's memory:
            layers x 2 x sequences x kv heads x (prompt + max_new_tokens) x head dim values).
        return_logprobs: report the sampled tokens' log-probs (``Generation.logprobs``).

    Example::

        rollout:
          engine: {class_path: lite_ppo.rollout.BatchedEngine, init_args: {max_sequences: 1024}}
    """

    def __init__(self, max_sequences: int = 1024, return_logprobs: bool = True) -> None:
        if max_sequences < 1:
            raise ValueError(f"BatchedEngine.max_sequences must be >= 1, got {max_sequences}")
        self.max_sequences = max_sequences
        self.return_logprobs = return_logprobs

    def setup(self, policy: torch.nn.Module, tokenizer, model_path: str) -> None:
        decoder_stack(policy)  # refuses an architecture it cannot decode, at the first rollout
        super().setup(policy, tokenizer, model_path)

    def prompts_per_call(self, sampling: SamplingConfig) -> int:
        return max(1, self.max_sequences // (1 if sampling.greedy else sampling.n))

    @torch.inference_mode()
    def _generate_chunk(
        self, prompts: list[list[int]], sampling: SamplingConfig, eos_ids: list[int]
    ) -> list[list[Generation]]:
        per_prompt = 1 if sampling.greedy else sampling.n  # greedy samples are identical: decode one
        pad_id = self._pad_id(eos_ids)
        input_ids, attention_mask = self._left_padded(prompts, pad_id)
        device, width = input_ids.device, input_ids.shape[1]
        rows = len(prompts) * per_prompt
        limit = sampling.max_new_tokens
        decoder = CachedDecoder(self._policy, len(prompts), width, limit, repeat=per_prompt)
        tokens = torch.full((rows, limit), pad_id, dtype=torch.long, device=device)
        logprobs = torch.zeros((rows, limit), dtype=torch.float32, device=device)
        lengths = torch.full((rows,), limit, dtype=torch.long, device=device)  # limit: no EOS (truncated)
        finished = torch.zeros(rows, dtype=torch.bool, device=device)
        eos = torch.tensor(eos_ids, device=device)
        active = torch.arange(rows, device=device)  # the original row of each row the decoder holds
        live = torch.ones(rows, dtype=torch.bool, device=device)  # ... and whether it is still open
        logits = decoder.prefill(input_ids, attention_mask)
        for t in range(limit):
            if sampling.greedy:
                chosen = logits.argmax(dim=-1)
            else:
                scaled = logits / sampling.temperature  # once, for the draw and for the log-prob
                chosen = sample_next(scaled, 1.0, sampling.top_k, sampling.top_p)
                if self.return_logprobs:  # log pi at temperature T, before top-k/top-p: the trainer's
                    picked = scaled.gather(-1, chosen[:, None]).squeeze(-1)
                    logprobs[active, t] = (picked - scaled.logsumexp(dim=-1)).float()
            chosen = torch.where(live, chosen, pad_id)  # a finished row decodes pads until it is dropped
            tokens[active, t] = chosen
            ended = live & torch.isin(chosen, eos)
            lengths[active[ended]] = t + 1
            finished[active[ended]] = True
            if self.on_tokens is not None:
                self.on_tokens(int(live.sum()))
            live &= ~ended
            still_open = int(live.sum())
            if t + 1 == limit or still_open == 0:
                break
            if still_open <= _COMPACT_AT * len(active):  # drop the finished rows from the batch
                decoder.keep(live)
                active, chosen = active[live], chosen[live]
                live = torch.ones(len(active), dtype=torch.bool, device=device)
            logits = decoder.step(chosen)
        return self._generations(tokens, logprobs, lengths, ~finished, len(prompts), per_prompt, sampling)

    def _generations(self, tokens, logprobs, lengths, open_rows, prompts, per_prompt, sampling):
        token_rows, length_of, open_of = tokens.tolist(), lengths.tolist(), open_rows.tolist()
        report = self.return_logprobs and not sampling.greedy
        logprob_rows = logprobs.tolist() if report else None
        result: list[list[Generation]] = []
        for p in range(prompts):
            group = []
            for row in range(p * per_prompt, (p + 1) * per_prompt):
                end = length_of[row]
                group.append(
                    Generation(
                        token_rows[row][:end],
                        finished=not open_of[row],
                        logprobs=logprob_rows[row][:end] if report else None,
                    )
                )
            result.append(with_greedy_copies(group, sampling))
        return result
