"""What a problem template produces, shared by the task families (``synthetic``, ``testbed``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GeneratedItem:
    """What a template produces: the statement, its answer and how hard it is."""

    text: str
    answer: int
    expression: str  # Python-evaluable, with the text's numbers in the text's order
    kind: str  # "arithmetic" or "word"

    @property
    def operands(self) -> list[int]:
        return [int(token) for token in _numbers(self.expression)]


def _numbers(text: str) -> list[str]:
    out, current = [], ""
    for char in text:
        if char.isdigit():
            current += char
        elif current:
            out.append(current)
            current = ""
    return out + ([current] if current else [])
