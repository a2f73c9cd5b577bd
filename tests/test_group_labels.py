"""Group labels of ``lite-ppo compare`` tell every two groups apart: groups of one recipe and model that
differ in a setting get what tells them apart appended, and ``+N more`` never hides the only difference
of two groups (run folders with event files and config.yaml, as ``lite-ppo fit`` writes them)."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import yaml

from helpers.compare_runs import write_run
from lite_ppo.research.compare import main as compare_main
from lite_ppo.research.runs import Run, find_runs, group_runs


def _technique(name: str, **init_args) -> dict:
    entry = {"class_path": f"lite_ppo.callbacks.{name}"}
    return entry | ({"init_args": init_args} if init_args else {})


def _variant(root: Path, folder: str, callbacks: list[dict], lr: float = 1e-6) -> None:
    """Two seeds of recipe ``lite`` on the tiny model, saved with these callbacks and this lr."""
    for seed in (0, 1):
        run_dir = write_run(root / folder, "lite", seed, 4, 0.5, 0.0, clip=False, lr=lr)
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
        config["trainer"]["callbacks"] = callbacks
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config))


def test_two_groups_that_differ_only_in_a_technique_setting_get_distinct_labels(tmp_path):
    """Three groups: a plain one, one with four more techniques and another lr (six differing entries, so
    two go to ``+2 more``), and one that differs from the plain one only in LossAggregation's mode. The
    mode used to be among the two left out, so the plain group and the last one read alike."""
    root = tmp_path / "runs"
    token = _technique("LossAggregation", mode="token-mean")
    _variant(root, "plain", [token])
    extra = [_technique(name) for name in ("ClipHigher", "DynamicSampling", "EntropyBonus", "KLPenalty")]
    _variant(root, "many", [token, *extra], lr=1e-5)
    _variant(root, "seq", [_technique("LossAggregation", mode="seq-mean-token-mean")])
    out = tmp_path / "cmp"
    assert compare_main([str(root), "--out", str(out)]) == 0
    labels = sorted(g["label"] for g in json.loads((out / "summary.json").read_text())["groups"])
    assert len(set(labels)) == 3, labels
    # What tells the groups apart comes first (ClipHigher: the four-technique group from the others;
    # the mode: the two others from each other), then other differences up to four entries, then the count.
    assert labels == [
        "lite/tiny (ClipHigher=-, LossAggregation.mode=seq-mean-token-mean, DynamicSampling=-, EntropyBonus=-, "
        "+2 more)",
        "lite/tiny (ClipHigher=-, LossAggregation.mode=token-mean, DynamicSampling=-, EntropyBonus=-, +2 more)",
        "lite/tiny (ClipHigher=on, LossAggregation.mode=token-mean, DynamicSampling=on, EntropyBonus=on, +2 more)",
    ]


def test_a_technique_argument_is_shown_where_the_technique_alone_leaves_two_groups_alike(tmp_path):
    """Without ClipHigher, with it at eps_high 0.28 and at 0.32: ``ClipHigher=on`` in two labels said
    nothing of the 0.28 against 0.32 that tells them apart."""
    root = tmp_path / "runs"
    token = _technique("LossAggregation", mode="token-mean")
    _variant(root, "symmetric", [token])
    _variant(root, "higher", [token, _technique("ClipHigher", eps_high=0.28)])
    _variant(root, "wider", [token, _technique("ClipHigher", eps_high=0.32)])
    groups = group_runs(find_runs([str(root)]))
    assert [len(g.runs) for g in groups] == [2, 2, 2]  # seeds still group together
    by_folder = {g.runs[0].path.parents[2].name: g.label for g in groups}
    assert len(set(by_folder.values())) == 3, by_folder
    assert "eps_high=0.28" in by_folder["higher"] and "eps_high=0.32" in by_folder["wider"]
    assert "ClipHigher=-" in by_folder["symmetric"]


def test_labels_are_distinct_for_any_set_of_differing_configs(tmp_path):
    """Random sets of groups drawn from a grid of settings at different depths (a top-level option, a
    technique on or off, a technique's argument, a model option): every set gets distinct labels, and
    no label is cut before an entry that tells two of the groups apart."""
    grid = list(
        itertools.product(
            ["a", "b"],  # data.file
            [None, 0.28, 0.32],  # ClipHigher absent, or its eps_high
            ["token-mean", "seq-mean-token-mean"],  # LossAggregation.mode
            [1e-6, 1e-5],  # model.lr
            [None, "on"],  # DynamicSampling
        )
    )
    rng = random.Random(0)
    for trial in range(60):
        cells = rng.sample(grid, rng.randint(2, 9))
        runs = []
        for i, (file, eps, mode, lr, dynamic) in enumerate(cells):
            callbacks = [_technique("LossAggregation", mode=mode)]
            callbacks += [_technique("ClipHigher", eps_high=eps)] if eps is not None else []
            callbacks += [_technique("DynamicSampling")] if dynamic else []
            config = {
                "model": {"model_path": "builtin:tiny", "lr": lr},
                "data": {"file": file},
                "trainer": {"callbacks": callbacks},
            }
            runs.append(Run(tmp_path / f"g{i}" / "seed0", {"recipe": "lite", "model": "tiny", "seed": 0}, config))
        labels = [g.label for g in group_runs(runs)]
        assert len(labels) == len(cells) and len(set(labels)) == len(labels), (trial, labels)
        # The part before "+N more" alone tells them apart: nothing that matters is in the count.
        assert len({label.split(", +")[0] for label in labels}) == len(labels), (trial, labels)
