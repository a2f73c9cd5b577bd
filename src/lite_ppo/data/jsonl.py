"""Read problems from JSONL files (plain or ``.jsonl.gz``), and Parquet when pyarrow exists.

The schema: every record needs non-empty string fields ``id``, ``problem`` and ``answer``;
``level`` (int), ``difficulty`` (str) and ``source`` (str) are optional, other fields are ignored.
Files are UTF-8. A bad record raises :class:`DataFormatError` naming the file, the 1-based line
(or row) and the field, so a user can open the file at the right place; a byte that is not UTF-8
is reported the same way (with the field whose text holds it), and a file without a single record
says that it is empty.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from lite_ppo.data.problem import Problem
from lite_ppo.errors import UserError

REQUIRED_FIELDS = ("id", "problem", "answer")


class DataFormatError(UserError):
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


def _encoding_error(raw: bytes, error: UnicodeDecodeError, where: str) -> DataFormatError:
    """Name the field whose text holds the first non-UTF-8 byte of a line (when it is in a value)."""
    column = len(raw[: error.start].decode("utf-8", errors="replace")) + 1
    what = f"byte 0x{raw[error.start]:02x} at column {column} is not UTF-8 (save the file as UTF-8)"
    try:  # surrogateescape keeps the bad byte as a lone surrogate, so the record still parses
        record = json.loads(raw.decode("utf-8", errors="surrogateescape"))
    except json.JSONDecodeError:
        return DataFormatError(f"{where}: {what}")
    if isinstance(record, Mapping):
        for name, value in record.items():
            if isinstance(value, str) and any("\udc80" <= char <= "\udcff" for char in value):
                return DataFormatError(f"{where}: field '{name}': {what}")
    return DataFormatError(f"{where}: {what}")


def _raw_lines(path: Path) -> Iterator[bytes]:
    """The file's lines as bytes; ``.gz`` files are decompressed (errors name the file)."""
    if path.suffix.lower() != ".gz":
        with path.open("rb") as handle:
            yield from handle
        return
    try:
        with gzip.open(path, "rb") as handle:
            yield from handle
    except (OSError, EOFError, zlib.error) as error:  # gzip.BadGzipFile is an OSError
        raise DataFormatError(f"{path}: not a readable gzip file ({error or type(error).__name__})") from None


def jsonl_records(path: str | os.PathLike[str]) -> Iterator[tuple[str, Any]]:
    """``("<file>:<line>", decoded JSON value)`` for every non-blank line of a JSONL(.gz) file.

    Raises:
        DataFormatError: a line is not UTF-8 or not JSON (the message names file, line, and the
            field for an encoding error inside a value), or the file has no record at all.

    Example:
        >>> next(jsonl_records("train/easy.jsonl"))  # doctest: +SKIP
        ('train/easy.jsonl:1', {'id': 'gsm8k-train-0', ...})
    """
    path = Path(path)
    found = False
    for line_number, raw in enumerate(_raw_lines(path), start=1):
        where = f"{path}:{line_number}"
        if line_number == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]  # a UTF-8 byte-order mark (Windows editors) is not part of the record
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise _encoding_error(raw, error, where) from None
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            # Some of json's messages end in "at" ("Unterminated string starting at"): the column completes them.
            at = "" if error.msg.endswith(" at") else " at"
            raise DataFormatError(f"{where}: invalid JSON ({error.msg}{at} column {error.colno})") from None
        found = True
        yield where, record
    if not found:
        raise DataFormatError(f"{path}: the file is empty (no JSON records); a data file needs at least one problem")


def load_jsonl_problems(path: str | os.PathLike[str], tier: str | None = None) -> list[Problem]:
    """Load every problem of a JSONL file (``.jsonl`` or ``.jsonl.gz``), validating each line.

    Args:
        path: the ``.jsonl`` / ``.jsonl.gz`` file.
        tier: tier for every problem; ``None`` takes each record's ``difficulty`` field, or the file
            stem (``math500`` for ``eval/math500.jsonl``) when a record has none.

    Raises:
        DataFormatError: a line is not UTF-8, not JSON, not an object, or has a
            missing/empty/mistyped field, or the file is empty; the message reads like
            ``easy.jsonl:17: field 'answer' is missing``.

    Example:
        >>> problems = load_jsonl_problems("data/train/easy.jsonl")  # doctest: +SKIP
        >>> problems[0].tier  # doctest: +SKIP
        'easy'
    """
    path = Path(path)
    stem = path.name.split(".")[0]  # "math500" for math500.jsonl and math500.jsonl.gz
    located = [(where, problem_from_record(record, where, tier, stem)) for where, record in jsonl_records(path)]
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
    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as error:  # pyarrow raises several types (ArrowInvalid, OSError) for a bad file
        raise DataFormatError(f"{path}: not a readable Parquet file ({error})") from None
    if not rows:
        raise DataFormatError(f"{path}: the file is empty (no rows); a data file needs at least one problem")
    located = [
        (f"{path}:{row}", problem_from_record(record, f"{path}:{row}", tier, path.stem))
        for row, record in enumerate(rows, start=1)
    ]
    _check_unique_ids(located)
    return [problem for _, problem in located]


def load_problems(path: str | os.PathLike[str], tier: str | None = None) -> list[Problem]:
    """Load a ``.parquet`` file with :func:`load_parquet_problems`, anything else as JSONL
    (``.jsonl.gz`` decompressed).

    Example:
        >>> load_problems("data/eval/math500.jsonl")[0].id  # doctest: +SKIP
        'math500/test/precalculus/807.json'
    """
    if Path(path).suffix.lower() == ".parquet":
        return load_parquet_problems(path, tier)
    return load_jsonl_problems(path, tier)
