"""The technique advisor against round 2's headroom studies (docs/takeaways.md, "The advisor against the
round-2 studies"), on the recorded diagnostics of their runs (``tests/data/takeaways_advisor_r2.json.gz``,
written by ``benchmarks/advisor_on_studies.py --record``: per run the 120-step series the rules read and its
configuration facts). Each rule's firing is checked against the study's own measurement of its premise,
computed here from the recorded series, and against what the study section says it did."""

from __future__ import annotations

import gzip
import json
import math
from collections import defaultdict

import numpy as np
import pytest

from helpers.paths import REPO
from lite_ppo.research.context import RunContext
from lite_ppo.research.rules import advise
from lite_ppo.research.scalars import Series

RECORD = REPO / "tests" / "data" / "takeaways_advisor_r2.json.gz"


@pytest.fixture(scope="module")
def runs() -> list[dict]:
    return json.loads(gzip.decompress(RECORD.read_bytes()).decode("utf-8"))["runs"]


def _fired(run: dict) -> set[str]:
    ctx = RunContext(**{k: tuple(v) if isinstance(v, list) else v for k, v in run["context"].items()})
    table = {tag: Series.from_pairs([tuple(pair) for pair in pairs]) for tag, pairs in run["scalars"].items()}
    return {finding.rule for finding in advise(table, ctx)}


def _cells(runs: list[dict], study: str) -> dict[str, list[dict]]:
    cells = defaultdict(list)
    for run in runs:
        if run["study"] == study:
            cells[json.dumps(run["cell"], sort_keys=True)].append(run)
    return cells


def _last_quarter(run: dict, tag: str) -> float:
    """The mean of the last quarter of a run's logged steps, computed apart from the rules' own window code."""
    values = np.array([value for _, value in run["scalars"][tag]], dtype=float)
    return float(values[len(values) - math.ceil(len(values) / 4) :].mean())


@pytest.mark.parametrize(
    "study, cells, seeds",
    [
        ("r2_agg_headroom", ('{"agg": "seq"}', '{"agg": "token"}'), 48),
        ("r2_recipes_headroom", ('{"recipe": "dapo"}', '{"recipe": "grpo"}', '{"recipe": "lite_ppo"}'), 16),
    ],
)
def test_the_record_holds_every_seed_of_every_cell_at_120_steps(runs, study, cells, seeds):
    by_cell = _cells(runs, study)
    assert sorted(by_cell) == sorted(cells)
    for cell, members in by_cell.items():
        assert sorted(run["seed"] for run in members) == list(range(seeds)), cell
        for run in members:
            assert [step for step, _ in run["scalars"]["reward/accuracy"]] == list(range(120)), (cell, run["seed"])


def test_token_level_for_base_fires_on_every_sequence_level_run_of_r2_2h(runs):
    """R2-2h, base-like init on the headroom setting (hard-tier share 0.67, above the rule's 0.5): the rule
    that advises token-level loss fires on all 48 sequence-level runs and on none of the token-level ones
    (it advises what they already do). The study found no effect of 1.6 points or more for the advice."""
    cells = _cells(runs, "r2_agg_headroom")
    seq, token = cells['{"agg": "seq"}'], cells['{"agg": "token"}']
    assert {run["context"]["loss_aggregation"] for run in seq} == {"seq-mean-token-mean"}
    assert {run["context"]["loss_aggregation"] for run in token} == {"token-mean"}
    assert all(run["context"]["model_kind"] == "base" and run["context"]["hard_share"] >= 0.5 for run in seq)
    assert [run["seed"] for run in seq if "token_level_for_base" not in _fired(run)] == []
    assert [run["seed"] for run in token if "token_level_for_base" in _fired(run)] == []


def test_token_level_for_base_fires_on_grpo_alone_in_r2_5h(runs):
    """R2-5h, the three recipes on the headroom setting: of them only GRPO aggregates per sequence, so the
    rule fires on its 16 runs and on no Lite PPO or DAPO run. Lite PPO (token level) − GRPO came out at
    −0.004, no effect larger than 1.5 points: again no support for the advice, and no contradiction."""
    cells = _cells(runs, "r2_recipes_headroom")
    for cell, members in cells.items():
        sequence_level = {run["context"]["loss_aggregation"] for run in members} == {"seq-mean-token-mean"}
        assert sequence_level == (cell == '{"recipe": "grpo"}'), cell
        fired = [run["seed"] for run in members if "token_level_for_base" in _fired(run)]
        assert fired == ([run["seed"] for run in members] if sequence_level else []), cell


@pytest.mark.parametrize(
    "study, low_signal_runs, negligible_clip_runs",
    [
        # R2-2h's section: low_reward_signal on 95 of the 96 runs, clip_higher_cannot_matter on all 96.
        ("r2_agg_headroom", 95, 96),
        # R2-5h's: low_reward_signal on 16 Lite PPO, 12 GRPO and 13 DAPO runs; clip_higher_cannot_matter on
        # the 32 runs without ClipHigher (DAPO has it, so the rule cannot read its symmetric bound).
        ("r2_recipes_headroom", 41, 32),
    ],
)
def test_low_reward_signal_and_clip_higher_cannot_matter_follow_the_measured_premises(
    runs, study, low_signal_runs, negligible_clip_runs
):
    """Each run's firing agrees with its premise computed here from the recorded series: a recent batch
    reward std below 0.3 or mixed groups below half; an upper-clip share of A>0 tokens below 0.005 at the
    symmetric bound (no ClipHigher). The counts are the ones the study sections report."""
    members = [run for run in runs if run["study"] == study]
    low_signal = [_last_quarter(run, "reward/std") < 0.3 or _last_quarter(run, "groups/mixed") < 0.5 for run in members]
    negligible_clip = [
        _last_quarter(run, "clip/upper_of_positive") < 0.005 and "ClipHigher" not in run["context"]["techniques"]
        for run in members
    ]
    fired = [_fired(run) for run in members]
    assert [("low_reward_signal" in f) for f in fired] == low_signal
    assert [("clip_higher_cannot_matter" in f) for f in fired] == negligible_clip
    assert (sum(low_signal), sum(negligible_clip)) == (low_signal_runs, negligible_clip_runs)
