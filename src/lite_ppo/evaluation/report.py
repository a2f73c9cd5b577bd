"""Report writers: the benchmark x metric table (Markdown / console), metrics.json, responses.jsonl."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lite_ppo.reliability.checkpoint_io import atomic_write_bytes

RATE_PREFIXES = ("accuracy", "mean@", "pass@", "maj@", "truncation_rate", "unparsed_rate", "status/")
AVERAGE_ROWS = (("average", "average"), ("weighted_average", "weighted average"))


def table_columns(metrics: Iterable[str]) -> list[str]:
    """The metrics shown in tables, in a fixed order (status shares and counts other than
    ``num_problems`` stay in metrics.json)."""
    keys = list(metrics)
    passk = sorted((k for k in keys if k.startswith("pass@")), key=lambda k: int(k[5:]))
    order = [
        "num_problems",
        "accuracy",
        *[k for k in keys if k.startswith("mean@")],
        *passk,
        *sorted((k for k in keys if k.startswith("maj@")), key=lambda k: int(k[4:])),
        "response_length",
        "truncation_rate",
        "unparsed_rate",
    ]
    return [k for k in order if k in keys]


def _header(key: str, greedy: bool | None = None) -> str:
    if key == "accuracy" and greedy is not None:
        # Named for what it is: greedy pass@1, or the share of correct among sampled responses (mean@1).
        return "accuracy % (greedy)" if greedy else "mean@1 %"
    return {
        "num_problems": "problems",
        "response_length": "length",
        "truncation_rate": "truncated %",
        "unparsed_rate": "unparsed %",
    }.get(key, f"{key} %" if key.startswith(("accuracy", "mean@", "pass@", "maj@")) else key)


def _shown_columns(metrics: Iterable[str]) -> list[str]:
    """The table's columns: :func:`table_columns`, less ``accuracy`` when a ``mean@n`` column holds the same
    number (n > 1 samples: accuracy is their mean, not greedy pass@1, so it is shown under that name only)."""
    columns = table_columns(metrics)
    if any(c.startswith("mean@") for c in columns):
        columns = [c for c in columns if c != "accuracy"]
    return columns


def format_value(key: str, value: float | None) -> str:
    """Rates as percentages with one decimal, lengths with one decimal, counts as integers."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if key in ("num_problems", "num_responses"):
        return str(int(round(value)))
    if key.startswith(RATE_PREFIXES):
        return f"{100 * value:.1f}"
    return f"{value:.1f}"


def table_rows(
    results: Mapping[str, Any], titles: Mapping[str, str] | None = None, greedy: bool | None = None
) -> tuple[list[str], list[list[str]]]:
    """Header and rows: one row per group, then the average rows (when present and non-empty).

    ``greedy``: whether the responses were decoded greedily (``SamplingConfig.greedy``); with one response
    per problem it names the accuracy column ``accuracy % (greedy)`` or ``mean@1 %`` (None: ``accuracy %``).
    With several (``mean@n``) the accuracy is their mean and shows only as ``mean@n %``."""
    groups: Mapping[str, Mapping[str, float]] = results["groups"]
    titles = titles or {}
    first = next(iter(groups.values()), {})
    columns = _shown_columns(first)
    header = ["benchmark", *(_header(c, greedy) for c in columns)]
    rows = [[titles.get(name, name), *(format_value(c, m.get(c)) for c in columns)] for name, m in groups.items()]
    for key, label in AVERAGE_ROWS:
        averaged = results.get(key) or {}
        if averaged and len(groups) > 1:
            rows.append([label, *(format_value(c, averaged.get(c)) for c in columns)])
    return header, rows


def markdown_table(
    results: Mapping[str, Any], titles: Mapping[str, str] | None = None, greedy: bool | None = None
) -> str:
    """The benchmark x metric table as GitHub Markdown (``greedy``: see :func:`table_rows`).

    Example:
        >>> print(markdown_table({"groups": {"a": {"num_problems": 2.0, "accuracy": 0.5}}}, greedy=True))
        | benchmark | problems | accuracy % (greedy) |
        | --- | ---: | ---: |
        | a | 2 | 50.0 |
    """
    header, rows = table_rows(results, titles, greedy)
    lines = ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * (len(header) - 1)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def text_table(
    results: Mapping[str, Any],
    titles: Mapping[str, str] | None = None,
    title: str | None = None,
    greedy: bool | None = None,
) -> str:
    """The same table aligned for a terminal."""
    header, rows = table_rows(results, titles, greedy)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = lambda row: "  ".join(
        cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))
    )  # noqa: E731
    lines = [title] if title else []
    lines += [fmt(header), "  ".join("-" * w for w in widths), *(fmt(r) for r in rows)]
    return "\n".join(lines)


def comparison_table(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    titles: Mapping[str, str] | None = None,
    key: str = "accuracy",
    label: str = "benchmark",
) -> str:
    """``benchmark | before | after | change`` of one metric (percentages), averages included;
    ``label`` names the first column (e.g. ``held-out tier``)."""
    titles = titles or {}
    names = list(after["groups"])
    rows = [(titles.get(n, n), before["groups"].get(n, {}).get(key), after["groups"][n].get(key)) for n in names]
    for avg, avg_title in AVERAGE_ROWS:
        if after.get(avg) and len(names) > 1:
            rows.append((avg_title, (before.get(avg) or {}).get(key), after[avg].get(key)))
    cells = [[label, f"{key} before %", f"{key} after %", "change"]]
    for row_title, b, a in rows:
        change = "-" if b is None or a is None else f"{100 * (a - b):+.1f}"
        cells.append([row_title, format_value(key, b), format_value(key, a), change])
    widths = [max(len(r[i]) for r in cells) for i in range(4)]
    return "\n".join(
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in cells
    )


# Each output file is replaced whole (atomic_write_bytes): a kill or a full disk while evaluating again
# into the same folder leaves the previous file, never a cut one.
def write_json(path: str | os.PathLike[str], payload: Mapping[str, Any]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, (json.dumps(payload, indent=2, sort_keys=False, ensure_ascii=False) + "\n").encode())
    return path


def write_jsonl(path: str | os.PathLike[str], records: Sequence[Mapping[str, Any]]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records).encode())
    return path


def write_report(
    out_dir: str | os.PathLike[str],
    results: Mapping[str, Any],
    titles: Mapping[str, str],
    info: Mapping[str, Any],
    records: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Path]:
    """Write ``metrics.json`` (every metric, per benchmark and averaged, plus ``info``),
    ``metrics.md`` (the table) and, when ``records`` is given, ``responses.jsonl``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    payload = {
        **info,
        "benchmarks": results["groups"],
        "average": results.get("average", {}),
        "weighted_average": results.get("weighted_average", {}),
        "titles": dict(titles),
    }
    paths = {"metrics.json": write_json(out / "metrics.json", payload)}
    header = [f"# Evaluation: {info.get('model', '')}".rstrip(), ""]
    describe = ", ".join(f"{k}={v}" for k, v in (info.get("sampling") or {}).items())
    if describe:
        header += [
            f"Sampling: {describe}. Rates in %, length in tokens; `average` is the unweighted mean over the averaged "
            "benchmarks, `weighted average` weights them by problem count.",
            "",
        ]
    greedy = (info.get("sampling") or {}).get("greedy")
    table = markdown_table(results, titles, greedy)
    atomic_write_bytes(out / "metrics.md", ("\n".join(header) + table + "\n").encode())
    paths["metrics.md"] = out / "metrics.md"
    if records is not None:
        paths["responses.jsonl"] = write_jsonl(out / "responses.jsonl", records)
    return paths
