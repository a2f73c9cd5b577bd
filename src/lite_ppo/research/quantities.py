"""The key quantities of a run that ``compare`` plots and summarises, in the order of the panels.

These are the training-state measurements Liu et al. ("Tricks or Traps? A Deep Dive into RL for
LLM Reasoning", arXiv 2508.08221) read their ablations from: accuracy during training and on held-out
benchmarks, response length, policy entropy, the clip fractions at both bounds, truncation and the
share of prompts whose G responses disagree (the only ones with a non-zero group advantage).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from lite_ppo import metric_names as names

__all__ = ["KEY_QUANTITIES", "Quantity", "eval_quantities", "quantities_for"]


@dataclass(frozen=True)
class Quantity:
    """A scalar tag with how to show it.

    ``share``: a fraction in [0, 1], plotted in percent. ``better``: which way is an improvement
    (the summary's "best" is the max or min accordingly; None: it reports the max). ``nonnegative``:
    the quantity cannot be below 0 (lengths, entropy, shares): figures clip their bands to its range.
    """

    tag: str
    title: str
    unit: str
    share: bool = False
    better: Literal["higher", "lower"] | None = None
    nonnegative: bool = True

    @property
    def value_range(self) -> tuple[float | None, float | None]:
        """The values the quantity can take: [0, 1] for a share, [0, inf) when non-negative."""
        return (0.0, 1.0) if self.share else ((0.0, None) if self.nonnegative else (None, None))

    @property
    def axis_label(self) -> str:
        return f"{self.title} ({'%' if self.share else self.unit})"

    @property
    def best_rule(self) -> str:
        return "min" if self.better == "lower" else "max"

    @property
    def evaluation(self) -> bool:
        """Logged at validations only (benchmark and held-out accuracies): drawn as points with error bars."""
        return self.tag.startswith((names.EVAL_PREFIX, names.VAL_PREFIX))

    @property
    def slug(self) -> str:
        return "".join(c if c.isalnum() else "_" for c in self.tag).strip("_")


KEY_QUANTITIES: tuple[Quantity, ...] = (
    Quantity(names.REWARD_ACCURACY, "Training accuracy", "share of responses", share=True, better="higher"),
    Quantity(names.EVAL_AVERAGE_ACCURACY, "Benchmark accuracy (average)", "greedy", share=True, better="higher"),
    Quantity(names.RESPONSE_LENGTH, "Response length", "tokens"),
    Quantity(names.ENTROPY, "Entropy", "nats/token"),
    Quantity(names.CLIP_LOWER_NEGATIVE, "Clipped at lower bound, A<0", "of A<0 tokens", share=True),
    Quantity(names.CLIP_UPPER_POSITIVE, "Clipped at upper bound, A>0", "of A>0 tokens", share=True),
    Quantity(names.TRUNCATION_RATE, "Truncation rate", "of responses", share=True, better="lower"),
    Quantity(names.GROUPS_MIXED, "Mixed groups", "of prompts", share=True, better="higher"),
)


def _per_name(tags: Iterable[str], prefix: str, tag_of, title: str) -> list[Quantity]:
    """One accuracy quantity per ``tag_of(name)`` tag present in ``tags`` (``prefix<name>/accuracy``)."""
    suffix = tag_of("")[len(prefix) :]  # what follows the name
    out = []
    for tag in sorted(set(tags)):
        if tag == names.EVAL_AVERAGE_ACCURACY or not (tag.startswith(prefix) and tag.endswith(suffix)):
            continue
        name = tag[len(prefix) : len(tag) - len(suffix)]
        if name and tag_of(name) == tag:
            out.append(Quantity(tag, f"{title}: {name}", "greedy", share=True, better="higher"))
    return out


def eval_quantities(tags: Iterable[str]) -> list[Quantity]:
    """One quantity per benchmark accuracy and per held-out training tier accuracy found among
    ``tags`` (the benchmark average is a key quantity of its own)."""
    tags = list(tags)
    return [
        *_per_name(tags, names.EVAL_PREFIX, names.eval_accuracy, "Benchmark accuracy"),
        *_per_name(tags, names.VAL_PREFIX, names.val_accuracy, "Held-out accuracy"),
    ]


def quantities_for(tags: Iterable[str]) -> list[Quantity]:
    """The key quantities followed by the per-benchmark and held-out-tier accuracies present in ``tags``."""
    return [*KEY_QUANTITIES, *eval_quantities(tags)]
