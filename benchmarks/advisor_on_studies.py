"""The technique advisor on the takeaway studies' runs (docs/takeaways.md, "The advisor against the round-2 studies").

Reads each run of the given study folders (``NAME=FOLDER``), prints which of the advisor's rules fire on it,
as a table per study and cell, and with ``--record FILE`` writes what the rules read: per run its study, cell,
seed, configuration facts (``RunContext``) and the per-step series of the tags the rules read, replacing those
studies' runs in FILE and keeping the other studies' (whose runs may no longer be on disk). The tests check
the advisor against the studies on that record (``tests/data/takeaways_advisor.json`` for round 1,
``tests/data/takeaways_advisor_r2.json.gz`` for round 2's headroom studies), not on the runs.

    .venv/bin/python benchmarks/advisor_on_studies.py aggregation=runs/study_agg \\
        clip_aligned=runs/study_clip_aligned --record tests/data/takeaways_advisor.json
    .venv/bin/python benchmarks/advisor_on_studies.py r2_agg_headroom=runs/r2_agg_headroom \\
        r2_recipes_headroom=runs/r2_recipes_headroom --record tests/data/takeaways_advisor_r2.json.gz
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
from collections import Counter, defaultdict
from pathlib import Path

from lite_ppo import metric_names as names
from lite_ppo.research.context import context_from_config
from lite_ppo.research.rules import advise
from lite_ppo.research.runs import find_runs
from lite_ppo.research.scalars import read_scalars

# Every tag a rule of lite_ppo.research.rules reads.
RULE_TAGS = (
    names.CLIP_UPPER_POSITIVE,
    names.ENTROPY,
    names.GROUPS_MIXED,
    names.REPETITION_TRUNCATED,
    names.RESPONSE_LENGTH,
    names.REWARD_ACCURACY,
    names.REWARD_STD,
    names.TRUNCATION_RATE,
)


def record_run(study: str, run) -> dict:
    table = read_scalars(run.path)
    ctx = context_from_config(run.config)
    record = run.record or {}
    context = dataclasses.asdict(ctx)
    return {
        "study": study,
        # A sweep over recipes alone has no factor cell: the recipe is the cell.
        "cell": record.get("cell") or {"recipe": record.get("recipe")},
        "seed": record.get("seed"),
        "context": {key: list(value) if isinstance(value, tuple) else value for key, value in context.items()},
        "scalars": {
            tag: [[int(step), round(float(value), 6)] for step, value in zip(table[tag].steps, table[tag].values)]
            for tag in RULE_TAGS
            if tag in table
        },
        "fired": [finding.rule for finding in advise(table, ctx)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("studies", nargs="+", help="NAME=FOLDER: a study's sweep folder")
    parser.add_argument(
        "--record", help="write the rules' inputs of these studies' runs to this JSON file (other studies' kept)"
    )
    args = parser.parse_args()
    records = []
    for item in args.studies:
        study, _, folder = item.partition("=")
        records += [record_run(study, run) for run in find_runs([folder])]
    fired = defaultdict(Counter)
    runs = Counter()
    for rec in records:
        key = (rec["study"], json.dumps(rec["cell"], sort_keys=True))
        runs[key] += 1
        fired[key].update(rec["fired"])
    print("| study | cell | runs | rules that fired (runs) |\n|---|---|---|---|")
    for key in sorted(runs):
        rules = ", ".join(f"{rule} ({count})" for rule, count in sorted(fired[key].items())) or "none"
        print(f"| {key[0]} | {key[1]} | {runs[key]} | {rules} |")
    if args.record:
        write_record(Path(args.record), records)


def read_record(path: Path) -> list[dict]:
    """The runs of a record written by ``write_record`` (gzip-compressed when its name ends in ``.gz``)."""
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return json.loads(data.decode("utf-8"))["runs"]


def write_record(path: Path, records: list[dict]) -> None:
    """Replace the given studies' runs in ``path``, keeping the other studies' (their runs may be gone).

    A name ending in ``.gz`` is written gzip-compressed (mtime 0, so the same runs give the same bytes): the
    round-2 studies' 120-step series are several times the size of round 1's."""
    studies = {rec["study"] for rec in records}
    kept = read_record(path) if path.is_file() else []
    kept = [run for run in kept if run["study"] not in studies]
    new = [{k: v for k, v in rec.items() if k != "fired"} for rec in records]
    data = (json.dumps({"runs": kept + new}) + "\n").encode("utf-8")
    if path.suffix == ".gz":
        data = gzip.compress(data, mtime=0)
    path.write_bytes(data)
    print(f"wrote {path}: {len(new)} runs of {', '.join(sorted(studies))}, {len(kept)} of other studies kept")


if __name__ == "__main__":
    main()
