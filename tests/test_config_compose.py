"""Composing configs never drops a technique: ``fit --config A --config B`` merges the files'
``trainer.callbacks`` by class (parsed by the real CLI, ``--print_config``); a technique given twice
is one line; two ``--factor`` fragments of one cell that set the same technique are refused."""

from __future__ import annotations

import pytest
import yaml

from helpers.paths import REPO
from lite_ppo.errors import UserError
from lite_ppo.research.factors import cell_config

RECIPES, FACTORS, MODELS = REPO / "configs/recipes", REPO / "configs/factors", REPO / "configs/models"


def _parsed_callbacks(capsys, *configs, extra=()) -> dict[str, dict]:
    from lite_ppo.cli import main

    args = ["fit"]
    for config in configs:
        args += ["--config", str(config)]
    with pytest.raises(SystemExit):
        main([*args, *extra, "--print_config"])
    captured = capsys.readouterr()
    callbacks = yaml.safe_load(captured.out)["trainer"]["callbacks"]
    return {cb["class_path"].rsplit(".", 1)[-1]: cb.get("init_args") or {} for cb in callbacks}, captured.err


def _file_callbacks(path) -> dict[str, dict]:
    listed = yaml.safe_load(path.read_text())["trainer"]["callbacks"]
    return {cb["class_path"].rsplit(".", 1)[-1]: cb.get("init_args") or {} for cb in listed}


def test_two_recipes_keep_both_techniques(capsys):
    got, err = _parsed_callbacks(
        capsys, RECIPES / "gspo.yaml", RECIPES / "lite_ppo_clip_cov.yaml", MODELS / "tiny.yaml"
    )
    gspo, clip_cov = _file_callbacks(RECIPES / "gspo.yaml"), _file_callbacks(RECIPES / "lite_ppo_clip_cov.yaml")
    assert "GSPO" in got and "ClipCov" in got  # jsonargparse alone keeps only the second file's list
    assert set(got) == set(gspo) | set(clip_cov)
    for name, args in clip_cov.items():  # the later file's settings win for a class both name
        assert {k: got[name][k] for k in args} == args
    assert "merged by class" in err


def test_recipe_then_factor_fragment_changes_one_technique(capsys):
    got, _ = _parsed_callbacks(capsys, RECIPES / "lite_ppo.yaml", FACTORS / "norm_group_std.yaml", MODELS / "tiny.yaml")
    recipe = _file_callbacks(RECIPES / "lite_ppo.yaml")
    assert set(got) == set(recipe)  # LossAggregation and the checkpoint cadence stay
    assert (got["AdvantageNormalization"]["mean_scope"], got["AdvantageNormalization"]["std_scope"]) == (
        "group",
        "group",
    )
    assert got["LossAggregation"]["mode"] == recipe["LossAggregation"]["mode"]
    assert got["ModelCheckpoint"]["every_n_train_steps"] == recipe["ModelCheckpoint"]["every_n_train_steps"]
    # Options after the configs still act on the merged list.
    got, _ = _parsed_callbacks(
        capsys,
        RECIPES / "lite_ppo.yaml",
        FACTORS / "clip_higher.yaml",
        extra=["--trainer.callbacks+=lite_ppo.callbacks.OverlongFilter"],
    )
    assert {"AdvantageNormalization", "LossAggregation", "ClipHigher", "OverlongFilter"} <= set(got)


def test_one_callback_list_is_left_to_the_parser(capsys):
    from lite_ppo.cli.compose import compose_callbacks

    args = ["fit", "--config", str(RECIPES / "lite_ppo.yaml"), "--config", str(MODELS / "tiny.yaml")]
    assert compose_callbacks(args) == (args, None)


@pytest.mark.parametrize(
    "extra",
    [
        [
            "--trainer.callbacks+=lite_ppo.callbacks.EntropyBonus",
            "--trainer.callbacks+=lite_ppo.callbacks.EntropyBonus",
        ],
        [
            "--trainer.callbacks+=lite_ppo.callbacks.HighEntropyTokens",
            "--trainer.callbacks+=lite_ppo.callbacks.HighEntropyTokens",
        ],
    ],
)
def test_a_technique_given_twice_is_one_line(tmp_path, monkeypatch, capsys, extra):
    from lite_ppo.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(["fit", "--config", str(RECIPES / "lite_ppo.yaml"), "--config", str(MODELS / "tiny.yaml"), *extra])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    name = extra[0].rsplit(".", 1)[-1]
    assert err[-1].startswith(f"lite-ppo fit: error: technique {name} is given twice"), err
    assert "Traceback" not in "\n".join(err)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("*.json"))


def test_a_technique_given_twice_without_the_cli():
    from lite_ppo.callbacks import HighEntropyTokens
    from lite_ppo.technique import refuse_repeated_techniques

    refuse_repeated_techniques([HighEntropyTokens, type(None)])  # once: fine
    with pytest.raises(UserError, match="HighEntropyTokens is given twice"):
        refuse_repeated_techniques([HighEntropyTokens, HighEntropyTokens])


def test_two_factors_setting_one_technique_are_refused(tmp_path):
    other = tmp_path / "norm_again.yaml"
    other.write_text(
        "trainer:\n  callbacks:\n    - class_path: lite_ppo.callbacks.AdvantageNormalization\n"
        "      init_args: {std_scope: none}\n"
    )
    with pytest.raises(UserError, match=r"both set AdvantageNormalization"):
        cell_config([str(RECIPES / "lite_ppo.yaml")], [str(FACTORS / "norm_group_std.yaml"), str(other)])
    # Two fragments of different techniques merge as before.
    merged = cell_config(
        [str(RECIPES / "lite_ppo.yaml")], [str(FACTORS / "norm_group_std.yaml"), str(FACTORS / "agg_seq.yaml")]
    )
    names = {cb["class_path"].rsplit(".", 1)[-1]: cb.get("init_args") for cb in merged["trainer"]["callbacks"]}
    assert (
        names["AdvantageNormalization"]["std_scope"] == "group"
        and names["LossAggregation"]["mode"] == "seq-mean-token-mean"
    )


def test_a_config_that_is_not_utf8_names_its_file(tmp_path):
    from lite_ppo.cli.compose import compose_callbacks

    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("trainer:\n  callbacks: []\n# caf\xe9\n".encode("latin-1"))
    with pytest.raises(UserError, match=r"latin1.yaml.*not UTF-8"):
        compose_callbacks(["fit", "--config", str(RECIPES / "lite_ppo.yaml"), "--config", str(bad)])


def test_a_later_config_removes_a_callback_by_name(tmp_path, capsys):
    mine = tmp_path / "mine.yaml"
    mine.write_text(
        "trainer:\n  callbacks:\n    - remove: lite_ppo.callbacks.AdvantageNormalization\n"
        "    - class_path: lite_ppo.callbacks.ReinforcePlusPlus\n"
    )
    got, err = _parsed_callbacks(capsys, RECIPES / "lite_ppo.yaml", mine, MODELS / "tiny.yaml")
    assert "AdvantageNormalization" not in got and "ReinforcePlusPlus" in got and "LossAggregation" in got
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer:\n  callbacks:\n    - remove: lite_ppo.callbacks.GSPO\n")
    from lite_ppo.cli.compose import compose_callbacks

    with pytest.raises(UserError, match=r"remove 'lite_ppo.callbacks.GSPO': no such callback"):
        compose_callbacks(["fit", "--config", str(RECIPES / "lite_ppo.yaml"), "--config", str(bad)])


def test_a_techniques_own_error_is_one_line_without_the_parsers_forms(tmp_path, monkeypatch, capsys):
    from lite_ppo.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        main(
            [
                "fit",
                *("--config", str(RECIPES / "lite_ppo.yaml"), "--config", str(MODELS / "tiny.yaml")),
                "--trainer.callbacks+=lite_ppo.callbacks.HighEntropyTokens",
                "--trainer.callbacks.share=2",
            ]
        )
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("HighEntropyTokens.share must be in (0, 1] (the paper: 0.2), got 2.0"), err
    assert "Not a valid subclass" not in err[-1] and "class path (str)" not in err[-1]


@pytest.mark.parametrize("fragment", ["overlong_filter.yaml", "agg_seq.yaml", "remove"])
def test_a_sweep_cell_parses_to_its_merged_callbacks(tmp_path, capsys, fragment):
    """A factorial point hands its cell's config to ``fit`` inline (longer than a file name may be):
    the CLI parses it to exactly the cell's callbacks, a removed technique included."""
    from lite_ppo.cli import main
    from lite_ppo.research.grid import expand_grid

    if fragment == "remove":
        path = tmp_path / "no_norm.yaml"
        path.write_text("trainer:\n  callbacks:\n    - remove: lite_ppo.callbacks.AdvantageNormalization\n")
    else:
        path = FACTORS / fragment
    recipe, model = str(RECIPES / "lite_ppo.yaml"), str(MODELS / "tiny.yaml")
    point = expand_grid([recipe], [0], [model], factors=[f"f=off,on:{path}"])[1]
    expected = {
        cb["class_path"].rsplit(".", 1)[-1]: cb.get("init_args") or {}
        for cb in yaml.safe_load(_cell_list(recipe, path))
    }
    args = [a for a in point.fit_args(tmp_path) if not a.startswith("--run_record.")]
    with pytest.raises(SystemExit):
        main([*args, "--print_config"])
    parsed = yaml.safe_load(capsys.readouterr().out)["trainer"]["callbacks"]
    got = {cb["class_path"].rsplit(".", 1)[-1]: cb.get("init_args") or {} for cb in parsed}
    assert set(got) == set(expected)
    for name, init_args in expected.items():
        assert {k: got[name][k] for k in init_args} == init_args


def _cell_list(recipe: str, fragment) -> str:
    """The cell's callbacks by hand: the recipe's list with the fragment's entries applied."""
    listed = yaml.safe_load(open(recipe))["trainer"]["callbacks"]
    for entry in yaml.safe_load(open(fragment))["trainer"]["callbacks"]:
        if "remove" in entry:
            listed = [cb for cb in listed if cb["class_path"] != entry["remove"]]
            continue
        same = [cb for cb in listed if cb["class_path"] == entry["class_path"]]
        if same:
            same[0]["init_args"] = {**same[0].get("init_args", {}), **entry.get("init_args", {})}
        else:
            listed.append(entry)
    return yaml.safe_dump(listed)
