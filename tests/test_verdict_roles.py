"""One primary verdict per contrast in ``lite-ppo compare``, the others labelled secondary, and no bound or
detection claimed by the bootstrap by problem below the seeds it was calibrated at (16 per cell,
docs/benchmarks.md). The pilots are sweeps' factorial cells with per-problem held-out results; which verdict
is primary is decided here from the design written (which cells differ in which factor)."""

from __future__ import annotations

import itertools
import json

import numpy as np

from helpers.pilot_runs import cell_run
from lite_ppo.research.compare import main as compare_main


def _solved(rng: np.random.Generator, difficulty: np.ndarray, shift: float) -> np.ndarray:
    """One run's 0/1 results: problem j solved with probability difficulty[j] + a seed's offset + ``shift``."""
    p = np.clip(difficulty + rng.normal(0.0, 0.03) + shift, 0.0, 1.0)
    return (rng.random(difficulty.size) < p).astype(float)


def _verdict_lines(console: str) -> list[str]:
    return [line for line in console.splitlines() if line.startswith("[")]


def test_a_two_seed_pilot_gets_one_primary_verdict_and_no_bootstrap_bound(tmp_path, capsys):
    """The issue's case: a one-factor sweep (clip off/on) on 2 seeds: Welch, the factorial main effect and the
    bootstrap all judge the one contrast. The main effect (per-seed contrasts: the design runs both cells on
    the same seeds) is primary; the bootstrap, which cannot see the spread between two seeds, shows its
    interval only."""
    rng = np.random.default_rng(5)
    difficulty = rng.uniform(0.1, 0.9, size=400)
    factors = {"clip": ["off", "on"]}
    for level, shift in (("off", 0.0), ("on", 0.01)):
        for seed in range(2):
            cell_run(tmp_path / "runs", {"clip": level}, factors, seed, _solved(rng, difficulty, shift))
    out = tmp_path / "cmp"
    assert compare_main([str(tmp_path / "runs"), "--out", str(out)]) == 0
    console = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    (pair,) = summary["score"]["pairs"]
    ((main_effect,),) = [d["main_effects"] for d in summary["factorial"]]
    roles = [pair["final"]["role"], pair["paired"]["role"], main_effect["role"]]
    assert roles == ["secondary", "secondary", "primary"]
    assert pair["primary"] == "factorial effect lite/tiny: main: clip on − off"

    lines = _verdict_lines(console)
    assert len(lines) == 3 and sum(line.startswith("[primary: ") for line in lines) == 1
    (primary,) = [line for line in lines if line.startswith("[primary: ")]
    assert "t-test of the per-seed contrasts" in primary and "main: clip on − off" in primary
    (boot,) = [line for line in lines if "per problem" in line]
    assert boot.startswith("[secondary: two-level bootstrap")
    assert "not calibrated below 16 seeds per cell (2 and 2 here)" in boot
    assert "no effect larger than 0" not in boot and "detected:" not in boot and "95 % CI" in boot
    assert pair["paired"]["calibrated"] is False
    md = (out / "summary.md").read_text()
    for line in lines:
        assert f"- {line.split('] ', 1)[0]}]" in md  # the same labels in summary.md


def test_in_a_2x2_a_pair_of_cells_is_decided_by_its_simple_effect_and_a_diagonal_pair_by_welch(tmp_path):
    rng = np.random.default_rng(7)
    difficulty = rng.uniform(0.2, 0.8, size=100)
    factors = {"norm": ["g", "b"], "agg": ["t", "s"]}
    for norm, agg in itertools.product(*factors.values()):
        for seed in range(3):
            cell_run(tmp_path / "runs", {"norm": norm, "agg": agg}, factors, seed, _solved(rng, difficulty, 0.0))
    out = tmp_path / "cmp"
    assert compare_main([str(tmp_path / "runs"), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    label = "lite/tiny [norm={}, agg={}]".format
    pairs = {frozenset((p["a"], p["b"])): p for p in summary["score"]["pairs"]}
    assert len(pairs) == 6
    # Cells differing in one factor: that factor's simple effect at the other's level is primary.
    for (n1, a1), (n2, a2) in itertools.combinations(itertools.product(*factors.values()), 2):
        pair = pairs[frozenset((label(n1, a1), label(n2, a2)))]
        if n1 != n2 and a1 != a2:
            assert pair["primary"] == "final (Welch t-test over seeds)" and pair["final"]["role"] == "primary"
        elif n1 != n2:
            assert pair["primary"] == f"factorial effect lite/tiny: simple: norm b − g at agg={a1}"
            assert pair["final"]["role"] == "secondary"
        else:
            assert pair["primary"] == f"factorial effect lite/tiny: simple: agg s − t at norm={n1}"
            assert pair["final"]["role"] == "secondary"
    (design,) = summary["factorial"]
    effects = [*design["main_effects"], *design["interactions"], *design["simple_effects"]]
    assert {e["role"] for e in effects} == {"primary"}


def test_from_the_calibrated_seed_count_the_bootstrap_states_its_verdict(tmp_path):
    from lite_ppo.research.bootstrap import BOOTSTRAP_CALIBRATED_SEEDS

    seeds = BOOTSTRAP_CALIBRATED_SEEDS
    assert seeds == 16  # the A/A runs of docs/benchmarks.md: 16 against 16 (and 24 against 24) seeds
    rng = np.random.default_rng(3)
    difficulty = rng.uniform(0.1, 0.9, size=60)
    factors = {"clip": ["off", "on"]}
    for level, shift in (("off", 0.0), ("on", 0.2)):
        for seed in range(seeds):
            cell_run(tmp_path / "runs", {"clip": level}, factors, seed, _solved(rng, difficulty, shift))
    out = tmp_path / "cmp"
    assert compare_main([str(tmp_path / "runs"), "--out", str(out)]) == 0
    (pair,) = json.loads((out / "summary.json").read_text())["score"]["pairs"]
    assert pair["paired"]["calibrated"] is True and pair["paired"]["verdict"].startswith("detected: ")


def test_an_effect_without_a_verdict_leaves_the_pair_to_welch(tmp_path):
    """Two cells that share one seed (0-1 against 1-2): the per-seed contrast has one value, no spread and no
    verdict, so it decides nothing and the pair's Welch test (2 against 2 seeds) is its primary verdict (the
    effect was marked primary and nothing was printed as primary). The bootstrap, uncalibrated at 2 seeds,
    states no MDE either."""
    rng = np.random.default_rng(11)
    difficulty = rng.uniform(0.2, 0.8, size=60)
    factors = {"clip": ["off", "on"]}
    for level, seeds in (("off", (0, 1)), ("on", (1, 2))):
        for seed in seeds:
            cell_run(tmp_path / "runs", {"clip": level}, factors, seed, _solved(rng, difficulty, 0.0))
    out = tmp_path / "cmp"
    assert compare_main([str(tmp_path / "runs"), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    (pair,) = summary["score"]["pairs"]
    assert pair["primary"] == "final (Welch t-test over seeds)" and pair["final"]["role"] == "primary"
    assert pair["final"]["verdict"]
    (design,) = summary["factorial"]
    assert all(effect["verdict"] is None for effect in design["main_effects"])
    assert pair["paired"] is not None and pair["paired"]["mde"] is None and not pair["paired"]["calibrated"]
