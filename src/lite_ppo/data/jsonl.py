"""Read problems from JSONL files (shared/data/README.md schema), and Parquet when pyarrow exists.

Every record needs non-empty string fields ``id``, ``problem`` and ``answer``; ``level`` (int),
``difficulty`` (str) and ``source`` (str) are optional, other fields are ignored. A bad record
raises :class:`DataFormatError` naming the file, the 1-based line (or row) and the field, so a
user can open the file at the right place.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from lite_ppo.data.problem import Problem

REQUIRED_FIELDS = ("id", "problem", "answer")


class DataFormatError(ValueError):
    """A data file breaks the schema; the message reads ``<file>:<line>: <what is wrong>``."""


def problem_from_record(record: Any, where: str, tier: str | None, default_tier: str) -> Problem:
    """Validate one decoded record and build a :class:`Problem`.

    Args:
        record: the decoded JSON value (must be an object).
        where: ``"<file>:<line>"`` used as the prefix of every error message.
        tier: tier to assign; when ``None`` the record's ``difficulty`` is used, else ``default_tier``.
        default_tier: fallback tier when neither ``tier`` nor ``difficulty`` is given.

    Example:
        >>> problem_from_record({"id": "a", "problem": "1+1?", "answer": "2"}, "x.jsonl:1", None, "x").tier
        'x'
    """
    if not isinstance(record, Mapping):
        raise DataFormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
    values: dict[str, str] = {}
    for name in REQUIRED_FIELDS:
        if name not in record or record[name] is None:
            raise DataFormatError(f"{where}: field '{name}' is missing")
        value = record[name]
        if not isinstance(value, str):
            raise DataFormatError(f"{where}: field '{name}' must be a string, got {type(value).__name__}")
        if not value.strip():
            raise DataFormatError(f"{where}: field '{name}' is empty")
        values[name] = value
    level = record.get("level")
    # bool is a subclass of int in Python; a boolean level is a data error, not level 0/1.
    if level is not None and (isinstance(level, bool) or not isinstance(level, int)):
        raise DataFormatError(f"{where}: field 'level' must be an integer, got {type(level).__name__}")
    for name in ("difficulty", "source"):
        value = record.get(name)
        if value is not None and not isinstance(value, str):
            raise DataFormatError(f"{where}: field '{name}' must be a string, got {type(value).__name__}")
    difficulty = record.get("difficulty")
    return Problem(
        id=values["id"],
        problem=values["problem"],
        answer=values["answer"],
        tier=tier if tier is not None else (difficulty or default_tier),
        source=record.get("source") or "",
        level=level,
    )


def _check_unique_ids(problems: Iterable[tuple[str, Problem]]) -> None:
    # Ids key results and logs; a silent duplicate would merge two problems' statistics.
    seen: dict[str, str] = {}
    for where, problem in problems:
        if problem.id in seen:
            raise DataFormatError(f"{where}: field 'id' repeats '{problem.id}' (first at {seen[problem.id]})")
        seen[problem.id] = where


def load_jsonl_problems(path: str | os.PathLike[str], tier: str | None = None) -> list[Problem]:
    """Load every problem of a JSONL file, validating each line.

    Args:
        path: the ``.jsonl`` file.
        tier: tier for every problem; ``None`` takes each record's ``difficulty`` field, or the file
            stem (``math500`` for ``eval/math500.jsonl``) when a record has none.

    Raises:
        DataFormatError: a line is not JSON, not an object, or has a missing/empty/mistyped field;
            the message reads like ``easy.jsonl:17: field 'answer' is missing``.

    Example:
        >>> problems = load_jsonl_problems("shared/data/train/easy.jsonl")  # doctest: +SKIP
        >>> problems[0].tier  # doctest: +SKIP
        'easy'
    """
    path = Path(path)
    located: list[tuple[str, Problem]] = []
    with path.open(encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}:{line_number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise DataFormatError(f"{where}: invalid JSON ({error.msg} at column {error.colno})") from None
            located.append((where, problem_from_record(record, where, tier, path.stem)))
    _check_unique_ids(located)
    return [problem for _, problem in located]


def load_parquet_problems(path: str | os.PathLike[str], tier: str | None = None) -> list[Problem]:
    """Load a Parquet file with the same columns as the JSONL schema (needs ``pyarrow``).

    Rows are numbered from 1 in error messages, like JSONL lines.

    Example:
        >>> problems = load_parquet_problems("train/easy.parquet", tier="easy")  # doctest: +SKIP
    """
    try:
        import pyarrow.parquet as pq
    except ImportError as error:  # pyarrow is optional: only Parquet users need it
        raise ImportError(f"reading {path} needs pyarrow: pip install pyarrow") from error
    path = Path(path)
    located = [
        (f"{path}:{row}", problem_from_record(record, f"{path}:{row}", tier, path.stem))
        for row, record in enumerate(pq.read_table(path).to_pylist(), start=1)
    ]
    _check_unique_ids(located)
    return [problem for _, problem in located]


def load_problems(path: str | os.PathLike[str], tier: str | None = None) -> list[Problem]:
    """Load a ``.parquet`` file with :func:`load_parquet_problems`, anything else as JSONL.

    Example:
        >>> load_problems("shared/data/eval/math500.jsonl")[0].id  # doctest: +SKIP
        'math500/test/precalculus/807.json'
    """
    if Path(path).suffix.lower() == ".parquet":
        return load_parquet_problems(path, tier)
    return load_jsonl_problems(path, tier)
