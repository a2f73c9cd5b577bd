"""``lite-ppo plan`` and ``compare`` count the same runs of a pilot: a diverged run, a run whose score is
NaN throughout and a run stopped early are left out of both, each named in the same note; a run whose
``run.json`` was cut short is left out of both with a note naming the file, instead of forming a group of
its own. Expected counts and SDs are computed here from the values written."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from helpers.pilot_runs import f32, scored_run
from lite_ppo.research.compare import main as compare_main
from lite_ppo.research.plan import main as plan_main
from lite_ppo.research.plan import plan

NAN = float("nan")
KEPT = {"alpha": [0.50, 0.52, 0.55], "beta": [0.40, 0.44, 0.41]}


def _notes(printed: str) -> list[str]:
    return [line for line in printed.splitlines() if line.startswith("note: ")]


def _pilot(root: Path) -> dict[str, list[Path]]:
    """Three good seeds per group, and in alpha a run whose final score is NaN (its last finite one, 0.2 at
    step 0, read as its score would be a broken run counted as finished) and one NaN throughout; in beta one
    run stopped after 2 of 6 steps."""
    kept: dict[str, list[Path]] = {}
    for recipe, values in KEPT.items():
        kept[recipe] = [scored_run(root, recipe, seed, value).resolve() for seed, value in enumerate(values)]
    scored_run(root, "alpha", 3, NAN)
    scored_run(root, "alpha", 4, None, scores={0: NAN, 6: NAN})
    scored_run(root, "beta", 3, 0.9, steps=2)
    return kept


def test_plan_and_compare_count_the_same_runs_and_say_the_same_notes(tmp_path, capsys):
    root = tmp_path / "pilot"
    kept = _pilot(root)
    assert plan_main([str(root), "--mde", "0.05"]) == 0
    planned = capsys.readouterr().out
    result = plan([str(root)], 0.05)
    # The SD plan plans from is that of the three good seeds per group, pooled (float32 event values).
    alpha, beta = f32(KEPT["alpha"]), f32(KEPT["beta"])
    hand_sd = math.sqrt((2 * statistics.variance(alpha) + 2 * statistics.variance(beta)) / 4)
    assert result["groups"] == {"alpha/tiny": 3, "beta/tiny": 3}
    assert result["sd"] == pytest.approx(hand_sd, rel=1e-9) and result["df"] == 4
    assert result["counted"] == {f"{recipe}/tiny": [str(p) for p in paths] for recipe, paths in kept.items()}

    out = tmp_path / "cmp"
    assert compare_main([str(root), "--out", str(out)]) == 0
    compared = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    counted_by_compare = {
        label: [r["run"] for r in group["runs"] if r["final"] is not None]
        for label, group in summary["score"]["groups"].items()
    }
    assert counted_by_compare == result["counted"]
    # The same notes, word for word: one per run left out (3), and nothing else on this pilot.
    assert _notes(planned) == _notes(compared) and len(_notes(planned)) == 3
    for run in ("alpha/tiny/seed3", "alpha/tiny/seed4", "beta/tiny/seed3"):
        assert sum(run in note for note in _notes(planned)) == 1, run


def test_a_run_whose_run_json_was_cut_short_is_left_out_of_both_with_a_note(tmp_path, capsys):
    root = tmp_path / "pilot"
    for recipe, values in KEPT.items():
        for seed, value in enumerate(values):
            scored_run(root, recipe, seed, value)
    record = root / "alpha" / "tiny" / "seed2" / "run.json"
    text = record.read_text()
    record.write_text(text[: len(text) // 2])  # a kill mid-write
    out = tmp_path / "cmp"
    assert compare_main([str(root), "--out", str(out)]) == 0
    compared = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    # Not a group of its own tested against its siblings: alpha is seeds 0 and 1, and the file is named.
    assert {g["label"]: g["seeds"] for g in summary["groups"]} == {"alpha/tiny": [0, 1], "beta/tiny": [0, 1, 2]}
    (pair,) = summary["score"]["pairs"]
    assert {pair["a"], pair["b"]} == {"alpha/tiny", "beta/tiny"}
    (note,) = [n for n in _notes(compared) if str(record.resolve()) in n]
    assert "damaged" in note and "not valid JSON" in note

    assert plan_main([str(root), "--mde", "0.05"]) == 0
    planned = capsys.readouterr().out
    assert _notes(planned) == _notes(compared)
    assert plan([str(root)], 0.05)["groups"] == {"alpha/tiny": 2, "beta/tiny": 3}
