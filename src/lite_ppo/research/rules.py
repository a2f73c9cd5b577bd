"""The technique advisor's rules: the practical reading of Liu et al., "Tricks or Traps? A Deep Dive
into RL for LLM Reasoning" (arXiv 2508.08221), applied to a run's measured diagnostics.

The paper's point is that technique choice should follow measurable training state, not labels.
Each rule is a pure function ``(table, context) -> Finding | None`` over the run's scalar series
(:mod:`lite_ppo.research.scalars`) and its configuration (:mod:`lite_ppo.research.context`), so
``lite-ppo advise`` (reading event files) and the ``TechniqueAdvisor`` callback (reading the live
metrics) give the same answers. Windows: "recent" is the mean over the last quarter of the logged
steps (at least one step), "early" over the first quarter; rules about a trend need at least
``MIN_TREND_STEPS`` steps.

Thresholds and why:

- ``CLIP_UPPER_NEGLIGIBLE = 0.005`` (share of A>0 tokens clipped at 1 + eps_high): the paper
  measured an upper-bound clip rate of about 0.003 on base models, where raising the bound
  (Clip-Higher) changed nothing; below 0.005 the objective is practically never cut at the upper
  bound, so moving it cannot matter. Read only at the symmetric bound (no ClipHigher): a rate
  measured at a raised bound says nothing about the symmetric one.
- ``CLIP_UPPER_ACTIVE = 0.01`` with entropy falling by ``ENTROPY_DROP = 10 %`` (recent vs early):
  about three times the level at which the paper saw no effect; the clipped A>0 tokens are the
  low-probability tokens whose growth the bound caps, and a shrinking entropy is the collapse
  Clip-Higher (DAPO's eps_high = 0.28; the paper sweeps 0.20-0.32) counters. The paper found it
  helps aligned models, which keep a higher entropy.
- ``MIXED_GROUPS_MIN = 0.5`` / ``REWARD_STD_LOW = 0.3``: a prompt whose G responses all agree has a
  zero group-centred advantage, so under half mixed groups means most of the batch carries no
  signal; for a binary reward std = sqrt(p(1 - p)), and 0.3 means batch accuracy outside roughly
  [0.1, 0.9]. The paper's reading: with a concentrated reward distribution compare removing the
  std scale (it over-amplifies small differences), and DAPO's dynamic sampling refills the batch
  with mixed groups.
- ``REWARD_STD_COLLAPSED = 0.05``: std 0.05 is an accuracy within 0.25 % of 0 or 1: practically
  every group agrees and there is nothing to learn from; the data is too easy or too hard for the
  model (the paper's easy/medium/hard tiers exist for this), and this rule supersedes the previous one.
- ``TRUNCATION_MIN = 0.05`` rising by ``TRUNCATION_RISE = 0.02``, with ``REPETITION_MIN = 0.5`` of the
  truncated responses repetitive: the paper found overlong filtering helped at an 8K limit, where
  truncated responses are mostly "answer, then repeat until the limit", and little at 20K, where
  truncation is genuine long reasoning; a majority of repetitive truncations says it is the former.
  Below 5 % truncation, masking them changes little of the batch.
- Base model with hard data (``HARD_SHARE_MIN = 0.5`` of the mixture) or long responses
  (``LONG_RESPONSE_TOKENS = 1024`` recent mean): the paper found token-level loss aggregation helps
  base models, most on hard data, whose responses run long; under sequence-level averaging each token
  of a 1024-token response weighs 1/1024 against 1/100 for a short one.
- Aligned model with token-level loss: the paper found sequence-level aggregation better for
  aligned models.

Example:
    >>> findings = advise(read_scalars("runs/lite_ppo/tiny/seed42"), context)  # doctest: +SKIP
    >>> print(format_findings(findings))                                      # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from lite_ppo import metric_names as names
from lite_ppo.research.context import RunContext
from lite_ppo.research.scalars import ScalarTable, Series

__all__ = ["RULES", "RULE_TAGS", "Finding", "advise", "format_findings"]

PAPER = "Liu et al. 2025 (arXiv 2508.08221)"
MIN_TREND_STEPS = 4
CLIP_UPPER_NEGLIGIBLE = 0.005
CLIP_UPPER_ACTIVE = 0.01
ENTROPY_DROP = 0.10
CLIP_HIGHER_EPS = 0.28
MIXED_GROUPS_MIN = 0.5
REWARD_STD_LOW = 0.3
REWARD_STD_COLLAPSED = 0.05
TRUNCATION_MIN = 0.05
TRUNCATION_RISE = 0.02
REPETITION_MIN = 0.5
HARD_SHARE_MIN = 0.5
LONG_RESPONSE_TOKENS = 1024.0

# The scalars the rules read (the callback keeps exactly these).
RULE_TAGS = (
    names.CLIP_UPPER_POSITIVE,
    names.ENTROPY,
    names.GROUPS_MIXED,
    names.REWARD_STD,
    names.REWARD_ACCURACY,
    names.TRUNCATION_RATE,
    names.REPETITION_TRUNCATED,
    names.RESPONSE_LENGTH,
)


@dataclass(frozen=True)
class Finding:
    """One piece of advice. Lower ``priority`` ranks first."""

    rule: str
    priority: int
    title: str
    measured: str
    threshold: str
    reasoning: str
    yaml: str

    def as_text(self, rank: int) -> str:
        yaml = "\n".join("    " + line for line in self.yaml.strip().splitlines())
        return (
            f"{rank}. {self.title}\n"
            f"   measured: {self.measured}\n"
            f"   threshold: {self.threshold}\n"
            f"   why: {self.reasoning}\n"
            f"   YAML:\n{yaml}"
        )


def _series(table: ScalarTable, tag: str) -> Series | None:
    series = table.get(tag)
    if series is None:
        return None
    series = series.finite()
    return series if len(series) else None


def _quarter(n: int) -> int:
    return max(1, math.ceil(n / 4))


def recent(series: Series) -> float:
    return float(np.mean(series.values[-_quarter(len(series)) :]))


def early(series: Series) -> float:
    return float(np.mean(series.values[: _quarter(len(series))]))


def _callback_yaml(action: str, class_path: str, init_args: str | None = None, where: str = "") -> str:
    lines = [
        f"# {action} under trainer.callbacks{where}:",
        "trainer:",
        "  callbacks:",
        f"    - class_path: {class_path}",
    ]
    if init_args:
        lines.append(f"      init_args: {init_args}")
    return "\n".join(lines)


def rule_reward_std_collapsed(table: ScalarTable, ctx: RunContext) -> Finding | None:
    std = _series(table, names.REWARD_STD)
    if std is None or recent(std) >= REWARD_STD_COLLAPSED:
        return None
    acc = _series(table, names.REWARD_ACCURACY)
    accuracy = recent(acc) if acc is not None else None
    if accuracy is not None and accuracy >= 0.5:
        verdict, weights = f"too easy (accuracy {accuracy:.3f})", "{easy: 0.2, medium: 0.4, hard: 0.4}"
    elif accuracy is not None:
        verdict, weights = f"too hard (accuracy {accuracy:.3f})", "{easy: 0.6, medium: 0.3, hard: 0.1}"
    else:
        verdict, weights = "too easy or too hard", "{easy: 0.4, medium: 0.4, hard: 0.2}"
    return Finding(
        rule="reward_std_collapsed",
        priority=0,
        title=f"Reward std has collapsed: the data is {verdict} for this model",
        measured=f"{names.REWARD_STD} = {recent(std):.4f} (recent mean)",
        threshold=f"< {REWARD_STD_COLLAPSED}",
        reasoning=(
            f"With (almost) every group all-correct or all-wrong every advantage is zero; {PAPER} "
            "pick the difficulty tier to the model, so change the tier mixture or use a curriculum."
        ),
        yaml=(
            "# change the tier mixture (or add --config configs/data/curriculum.yaml);\n# every weighted tier needs "
            f"a source (configs/data/synthetic.yaml, configs/data/paper_tiers.yaml):\ndata:\n  weights: {weights}"
        ),
    )


def rule_low_reward_signal(table: ScalarTable, ctx: RunContext) -> Finding | None:
    std, mixed = _series(table, names.REWARD_STD), _series(table, names.GROUPS_MIXED)
    if std is not None and recent(std) < REWARD_STD_COLLAPSED:
        return None  # the collapse rule says it more strongly
    low_std = std is not None and recent(std) < REWARD_STD_LOW
    few_mixed = mixed is not None and recent(mixed) < MIXED_GROUPS_MIN
    if not (low_std or few_mixed):
        return None
    measured = []
    if std is not None:
        measured.append(f"{names.REWARD_STD} = {recent(std):.3f}")
    if mixed is not None:
        measured.append(f"{names.GROUPS_MIXED} = {recent(mixed):.3f}")
    if ctx.has("DynamicSampling"):
        yaml = "# compare removing the std scale (Dr. GRPO style); change AdvantageNormalization:\n" + _callback_yaml(
            "change", "lite_ppo.callbacks.AdvantageNormalization", "{mean_scope: group, std_scope: none}"
        )
    else:
        yaml = (
            _callback_yaml(
                "add (before AdvantageNormalization)", "lite_ppo.callbacks.DynamicSampling", "{metric: correct}"
            )
            + "\nrollout:\n  max_refill_rounds: 10\n"
            + (
                "# or compare removing the std scale: AdvantageNormalization "
                "init_args {mean_scope: group, std_scope: none}"
            )
        )
    return Finding(
        rule="low_reward_signal",
        priority=1,
        title="Little reward signal per batch: try dynamic sampling or compare removing the std",
        measured=", ".join(measured) + " (recent means)",
        threshold=f"{names.REWARD_STD} < {REWARD_STD_LOW} or {names.GROUPS_MIXED} < {MIXED_GROUPS_MIN}",
        reasoning=(
            "All-same groups carry zero advantage; dynamic sampling keeps only mixed ones (it helped on this "
            f"project's testbed, per step and at equal generated tokens). {PAPER} also advise comparing "
            "without the std when the batch reward std is low; on the testbed that comparison came out even "
            "(docs/takeaways.md, R2-3, R2-6, R2-6b)."
        ),
        yaml=yaml,
    )


def rule_overlong_filtering(table: ScalarTable, ctx: RunContext) -> Finding | None:
    trunc, rep = _series(table, names.TRUNCATION_RATE), _series(table, names.REPETITION_TRUNCATED)
    if trunc is None or rep is None or len(trunc) < MIN_TREND_STEPS or ctx.has("OverlongFilter"):
        return None
    rise = recent(trunc) - early(trunc)
    if recent(trunc) < TRUNCATION_MIN or rise < TRUNCATION_RISE or recent(rep) < REPETITION_MIN:
        return None
    return Finding(
        rule="overlong_filtering",
        priority=2,
        title="Truncation is rising and the truncated responses repeat: add overlong filtering",
        measured=(
            f"{names.TRUNCATION_RATE} {early(trunc):.3f} -> {recent(trunc):.3f}, "
            f"{names.REPETITION_TRUNCATED} = {recent(rep):.3f}"
        ),
        threshold=(
            f"truncation >= {TRUNCATION_MIN} and rising by >= "
            f"{TRUNCATION_RISE}, repetition among truncated >= {REPETITION_MIN}"
        ),
        reasoning=(
            f"{PAPER} found masking truncated responses out of the loss helped at "
            "an 8K limit, where truncations are mostly answer-then-repeat loops."
        ),
        yaml=_callback_yaml("add (after AdvantageNormalization)", "lite_ppo.callbacks.OverlongFilter"),
    )


def rule_clip_higher_helps(table: ScalarTable, ctx: RunContext) -> Finding | None:
    clip, entropy = _series(table, names.CLIP_UPPER_POSITIVE), _series(table, names.ENTROPY)
    if clip is None or entropy is None or len(entropy) < MIN_TREND_STEPS or ctx.clip_eps_high >= CLIP_HIGHER_EPS:
        return None
    start, end = early(entropy), recent(entropy)
    if recent(clip) < CLIP_UPPER_ACTIVE or not (start > 0 and end <= start * (1 - ENTROPY_DROP)):
        return None
    if ctx.has("ClipHigher"):
        yaml = _callback_yaml(
            "change", "lite_ppo.callbacks.ClipHigher", f"{{eps_low: 0.2, eps_high: {CLIP_HIGHER_EPS}}}"
        )
    else:
        yaml = _callback_yaml("add", "lite_ppo.callbacks.ClipHigher", f"{{eps_low: 0.2, eps_high: {CLIP_HIGHER_EPS}}}")
    return Finding(
        rule="clip_higher_helps",
        priority=3,
        title="Many A>0 tokens hit the upper clip bound while entropy falls: Clip-Higher likely helps",
        measured=(
            f"{names.CLIP_UPPER_POSITIVE} = {recent(clip):.4f}, {names.ENTROPY} {start:.3f} -> "
            f"{end:.3f} ({(1 - end / start) * 100:.0f} % drop), eps_high = {ctx.clip_eps_high}"
        ),
        threshold=f"clip >= {CLIP_UPPER_ACTIVE} and entropy drop >= {ENTROPY_DROP:.0%}",
        reasoning=(
            "The upper bound caps the growth of low-probability tokens, which drives entropy collapse; "
            f"{PAPER} found raising it helps models whose clip rate is not negligible (their aligned ones; "
            "on this project's aligned-like testbed init the rate was negligible too and Clip-Higher showed "
            "no effect: docs/takeaways.md, R2-1)."
        ),
        yaml=yaml,
    )


def rule_token_level_for_base(table: ScalarTable, ctx: RunContext) -> Finding | None:
    if ctx.model_kind != "base" or ctx.loss_aggregation == "token-mean":
        return None
    length = _series(table, names.RESPONSE_LENGTH)
    long_responses = length is not None and recent(length) >= LONG_RESPONSE_TOKENS
    hard = ctx.hard_share is not None and ctx.hard_share >= HARD_SHARE_MIN
    if not (long_responses or hard):
        return None
    measured = [f"model: base ({ctx.model_kind_reason})", f"loss: {ctx.loss_aggregation}"]
    if ctx.hard_share is not None:
        measured.append(f"hard-tier share {ctx.hard_share:.2f}")
    if length is not None:
        measured.append(f"{names.RESPONSE_LENGTH} = {recent(length):.0f} tokens")
    return Finding(
        rule="token_level_for_base",
        priority=4,
        title="Base model on hard data / long responses: use token-level loss aggregation",
        measured=", ".join(measured),
        threshold=f"hard share >= {HARD_SHARE_MIN} or mean length >= {LONG_RESPONSE_TOKENS:.0f} tokens",
        reasoning=(
            f"{PAPER} found token-level aggregation helps base models, most on hard data, "
            "where sequence-level averaging down-weights each token of a long response."
        ),
        yaml=_callback_yaml("change", "lite_ppo.callbacks.LossAggregation", "{mode: token-mean}"),
    )


def rule_sequence_level_for_aligned(table: ScalarTable, ctx: RunContext) -> Finding | None:
    if ctx.model_kind != "aligned" or ctx.loss_aggregation != "token-mean":
        return None
    return Finding(
        rule="sequence_level_for_aligned",
        priority=5,
        title="Aligned model with token-level loss: compare sequence-level aggregation",
        measured=f"model: aligned ({ctx.model_kind_reason}), loss: {ctx.loss_aggregation}",
        threshold="model kind = aligned",
        reasoning=f"{PAPER} found sequence-level aggregation better than token-level for aligned (instruct) models.",
        yaml=_callback_yaml("change", "lite_ppo.callbacks.LossAggregation", "{mode: seq-mean-token-mean}"),
    )


def rule_clip_higher_cannot_matter(table: ScalarTable, ctx: RunContext) -> Finding | None:
    clip = _series(table, names.CLIP_UPPER_POSITIVE)
    # Measured at a raised bound (Clip-Higher on), a rate near zero says nothing about the symmetric
    # bound, so only a run at the symmetric bound can tell that raising it would not matter.
    if clip is None or recent(clip) >= CLIP_UPPER_NEGLIGIBLE or ctx.has("ClipHigher"):
        return None
    yaml = "# nothing to add: leave lite_ppo.callbacks.ClipHigher out of trainer.callbacks"
    return Finding(
        rule="clip_higher_cannot_matter",
        priority=6,
        title="Upper-bound clipping is practically never hit: Clip-Higher cannot matter",
        measured=f"{names.CLIP_UPPER_POSITIVE} = {recent(clip):.4f} (recent mean)",
        threshold=f"< {CLIP_UPPER_NEGLIGIBLE}",
        reasoning=(
            "Raising a bound that almost no ratio reaches leaves the objective unchanged; "
            f"{PAPER} measured about 0.003 on base models, where Clip-Higher did not help."
        ),
        yaml=yaml,
    )


Rule = Callable[[ScalarTable, RunContext], "Finding | None"]
RULES: tuple[Rule, ...] = (
    rule_reward_std_collapsed,
    rule_low_reward_signal,
    rule_overlong_filtering,
    rule_clip_higher_helps,
    rule_token_level_for_base,
    rule_sequence_level_for_aligned,
    rule_clip_higher_cannot_matter,
)


def advise(table: ScalarTable, ctx: RunContext, rules: tuple[Rule, ...] = RULES) -> list[Finding]:
    """Every finding of ``rules``, most important first."""
    findings = [f for f in (rule(table, ctx) for rule in rules) if f is not None]
    return sorted(findings, key=lambda f: f.priority)


def format_findings(findings: list[Finding], ctx: RunContext | None = None, steps: int | None = None) -> str:
    """The ranked findings as plain text (also valid Markdown inside a code block)."""
    head = []
    if steps is not None:
        head.append(f"read {steps} logged steps")
    if ctx is not None:
        head.append(f"model: {ctx.model_kind} ({ctx.model_kind_reason})")
    header = ("; ".join(head) + "\n") if head else ""
    if not findings:
        return header + "No rule fired: nothing in the measured diagnostics calls for a technique change."
    return header + "\n".join(f.as_text(i + 1) for i, f in enumerate(findings))
