"""Rollout-layout batches with shared prompts, and the unpacked full-logits reference the packed forwards must equal."""

from __future__ import annotations

import torch

from lite_ppo.rollout.batch import RolloutBatch

PAD = 0


def make_batch(
    prompt_lengths: list[int],
    group_size: list[int],
    response_lengths: list[int],
    vocab: int,
    seed: int = 0,
    temperature: float = 0.8,
) -> RolloutBatch:
    """A rollout-layout batch: group g has prompt length prompt_lengths[g] and group_size[g] responses."""
    gen = torch.Generator().manual_seed(seed)
    p_width, r_width = max(prompt_lengths) + 1, max(response_lengths) + 2  # extra padding on both sides
    rows, groups = [], []
    it = iter(response_lengths)
    for g, (p, size) in enumerate(zip(prompt_lengths, group_size)):
        prompt = torch.randint(1, vocab, (p,), generator=gen)
        for _ in range(size):
            n = next(it)
            ids = torch.full((p_width + r_width,), PAD)
            ids[p_width - p : p_width] = prompt
            ids[p_width : p_width + n] = torch.randint(1, vocab, (n,), generator=gen)
            rows.append(ids)
            groups.append(g)
    input_ids = torch.stack(rows)
    attention_mask = (input_ids != PAD).long()
    lengths = attention_mask[:, p_width:].sum(-1)
    b = len(rows)
    return RolloutBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        response_mask=attention_mask[:, p_width:].clone(),
        group_ids=torch.tensor(groups),
        rewards=torch.zeros(b),
        truncated=torch.zeros(b, dtype=torch.bool),
        response_lengths=lengths,
        temperature=temperature,
    )


def reference_logprobs(model, batch: RolloutBatch) -> torch.Tensor:
    """The module's unpacked computation: full logits of the left-padded layout, log_softmax(z / T)."""
    from lite_ppo.ops import logprobs_from_logits

    width = batch.response_mask.shape[1]
    position_ids = (batch.attention_mask.cumsum(-1) - 1).clamp(min=0)
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=position_ids,
        use_cache=False,
        logits_to_keep=width + 1,
    )
    logits = out.logits[:, :-1].float() / batch.temperature
    return logprobs_from_logits(logits, batch.response_ids) * batch.response_mask


def surrogate_like_loss(logprobs: torch.Tensor, batch: RolloutBatch) -> torch.Tensor:
    # A token-mean loss with per-response weights, so every response and token matters differently.
    weights = torch.linspace(-1.0, 2.0, batch.num_responses)[:, None]
    return (logprobs.exp() * weights * batch.response_mask).sum() / batch.response_mask.sum()


def assert_same_logprobs_and_gradients(model, batch: RolloutBatch, compute) -> None:
    """``compute(model, batch)`` gives the unpacked full-logits log-probs, and the same gradients of a
    surrogate-like loss, to fp32 tolerance."""
    model.zero_grad()
    expected = reference_logprobs(model, batch)
    surrogate_like_loss(expected, batch).backward()
    expected_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    got = compute(model, batch)
    surrogate_like_loss(got, batch).backward()
    torch.testing.assert_close(got, expected, rtol=0, atol=2e-5)
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, expected_grads[name], rtol=1e-4, atol=1e-6, msg=name)
