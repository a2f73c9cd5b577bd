"""Probe a model on the testbed: sample groups for held-out problems and record what each response shows.

The testbed (docs/testbed.md) is useful when its responses spread in length, part of them run into the
token limit, groups mix right and wrong and the tiers skew the reward. :func:`probe` measures that for
any model folder or builtin at given sampling settings: the first ``problems`` held-out problems of
every tier for a data seed (the problems the data module holds out for ``data.seed=seed``), the training
prompt format, HF ``generate`` seeded with ``seed``, the math-verify reward, and the entropy of the
model's next-token distribution (temperature 1) teacher-forced over each sampled response.
:func:`summarize` turns the rows into the shares docs/benchmarks.md reports.

Example:
    >>> from lite_ppo.rollout import SamplingConfig
    >>> sampling = SamplingConfig(n=8, max_new_tokens=64)
    >>> rows = probe("builtin:testbed-base", sampling, seed=0, problems=4)  # doctest: +SKIP
    >>> summarize(rows, n=8)["truncated"]  # doctest: +SKIP
    0.21
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch

from lite_ppo.data.testbed import TIERS

__all__ = ["ProbeRow", "probe", "summarize"]


@dataclass(frozen=True)
class ProbeRow:
    """One sampled response: its problem and tier, token count, whether it hit the limit, its reward,
    its style (a terse working with ``check`` passes, the formatted ``, result`` lines) and its mean
    entropy per token (nats)."""

    tier: str
    problem_id: str
    length: int
    truncated: bool
    correct: bool
    checks: bool
    formatted: bool
    entropy: float


@torch.no_grad()
def _entropies(model: torch.nn.Module, prompt: list[int], responses: list[list[int]], pad_id: int) -> list[float]:
    """Mean next-token entropy over each response's tokens, one right-padded forward per group."""
    width = len(prompt) + max(len(r) for r in responses)
    ids = torch.full((len(responses), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, response in enumerate(responses):
        tokens = prompt + response
        ids[row, : len(tokens)] = torch.tensor(tokens)
        mask[row, : len(tokens)] = 1
    logits = model(input_ids=ids, attention_mask=mask).logits[:, len(prompt) - 1 : -1].float()
    logp = torch.log_softmax(logits, -1)
    per_token = -(logp.exp() * logp).sum(-1)
    return [float(per_token[row, : len(r)].mean()) for row, r in enumerate(responses)]


def probe(model: str, sampling, seed: int, problems: int, tiers: tuple[str, ...] = TIERS) -> list[ProbeRow]:
    """Sample ``sampling.n`` responses for each of the first ``problems`` held-out problems of every tier.

    Args:
        model: a builtin name or a local model folder.
        sampling: a :class:`~lite_ppo.rollout.SamplingConfig` (its ``max_new_tokens`` is the limit probed).
        seed: the data seed (which problems) and the generation seed.
        problems: held-out problems per tier.
        tiers: testbed tiers to probe.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lite_ppo.data.prompts import PromptFormatter
    from lite_ppo.data.synthetic import SyntheticSource
    from lite_ppo.models import resolve_model
    from lite_ppo.rewards import MathVerifyReward
    from lite_ppo.rollout import HFEngine

    folder = resolve_model(model)
    policy = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    engine = HFEngine(batch_size=32)
    engine.setup(policy, tokenizer, folder)
    reward = MathVerifyReward(timeout_seconds=2, workers=0)
    rows = []
    for tier in tiers:
        source = SyntheticSource(tier, seed, stream="heldout", family="testbed")
        batch = [source.problem(i) for i in range(problems)]
        prompts = PromptFormatter().encode([p.problem for p in batch], tokenizer)
        for problem, prompt, group in zip(batch, prompts, engine.generate(prompts, sampling, seed=seed), strict=True):
            entropies = _entropies(policy, prompt, [g.token_ids for g in group], tokenizer.pad_token_id)
            for generation, entropy in zip(group, entropies, strict=True):
                text = tokenizer.decode(generation.token_ids, skip_special_tokens=True)
                rows.append(
                    ProbeRow(
                        tier=tier,
                        problem_id=problem.id,
                        length=len(generation.token_ids),
                        truncated=generation.truncated,
                        correct=reward.score(text, problem.answer).status == "correct",
                        checks=" check " in text,
                        formatted=", result " in text,
                        entropy=entropy,
                    )
                )
    return rows


def summarize(rows: list[ProbeRow], n: int) -> dict[str, float]:
    """Shares and length figures of probe rows: accuracy (overall and per tier), truncation, groups
    that mix right and wrong (and all-right / all-wrong ones), length mean / std / deciles, styles and
    mean entropy per token."""

    def share(values) -> float:
        values = list(values)
        return sum(map(bool, values)) / len(values)

    groups: dict[str, list[ProbeRow]] = {}
    for row in rows:
        groups.setdefault(row.problem_id, []).append(row)
    right = [sum(r.correct for r in g) for g in groups.values()]
    lengths = sorted(r.length for r in rows)
    deciles = statistics.quantiles(lengths, n=10)
    tiers = sorted({r.tier for r in rows}, key=TIERS.index)
    out = {"accuracy": share(r.correct for r in rows)}
    out.update({f"accuracy {t}": share(r.correct for r in rows if r.tier == t) for t in tiers})
    out.update(
        {
            "truncated": share(r.truncated for r in rows),
            "truncated and correct": share(r.truncated and r.correct for r in rows),
            "mixed groups": share(0 < c < n for c in right),
            "all-right groups": share(c == n for c in right),
            "all-wrong groups": share(c == 0 for c in right),
            "length mean": statistics.fmean(lengths),
            "length std": statistics.pstdev(lengths),
            "length p10": deciles[0],
            "length p50": deciles[4],
            "length p90": deciles[8],
            "with check passes": share(r.checks for r in rows),
            "formatted": share(r.formatted for r in rows),
            "entropy per token": statistics.fmean(r.entropy for r in rows),
        }
    )
    out.update({f"length mean {t}": statistics.fmean(r.length for r in rows if r.tier == t) for t in tiers})
    return out
