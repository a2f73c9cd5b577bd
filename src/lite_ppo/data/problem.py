"""One math problem with a verifiable final answer: the unit every data source produces."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


# Not frozen on purpose: Lightning's batch transfer (``apply_to_collection``) rebuilds dataclasses
# field by field and raises on frozen ones, so a frozen Problem could not travel in a batch.
@dataclass
class Problem:
    """A problem statement, its final answer and where it came from.

    Args:
        id: stable identifier, unique within its source (``"gsm8k-train-17"``, ``"synthetic-easy-3"``).
        problem: the statement shown to the model (LaTeX allowed).
        answer: the final answer only, as a string (``"71"``, ``"\\frac{1}{2}"``).
        tier: the difficulty tier it was drawn for (``"easy"``, ``"medium"``, ``"hard"`` or any name
            a data module gives its sources).
        source: origin label (``"GSM8K/train"``, ``"synthetic"``).
        level: MATH-style level when the source has one.
        metadata: extra facts a source records; the synthetic generator stores ``num_operations``,
            ``max_operand``, ``kind`` and ``expression`` here.

    Example:
        >>> problem = Problem(id="synthetic-easy-0", problem="What is 23 + 48?", answer="71", tier="easy")
        >>> problem  # doctest: +NORMALIZE_WHITESPACE
        Problem(id='synthetic-easy-0', problem='What is 23 + 48?', answer='71', tier='easy', source='',
                level=None, metadata={})
    """

    id: str
    problem: str
    answer: str
    tier: str
    source: str = ""
    level: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
