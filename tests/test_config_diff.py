"""What `lite-ppo fit` says sets a second run of one name (``seed<S>-1``) apart from the earlier one: the
settings in which their saved configs differ, computed here on hand-made configs and folders."""

from __future__ import annotations

from lite_ppo.research.config_diff import config_differences, describe_differences
from lite_ppo.research.run_naming import earlier_namesake


def _callbacks(*entries):
    return {"trainer": {"callbacks": list(entries)}}


def test_a_changed_option_is_named_with_both_values():
    earlier = {"model": {"lr": 1e-4, "clip_eps": 0.2}, "data": {"prompts_per_step": 4}}
    now = {"model": {"lr": 1e-5, "clip_eps": 0.2}, "data": {"prompts_per_step": 4}}
    assert config_differences(earlier, now) == [("model.lr", "0.0001", "1e-05")]


def test_callbacks_compare_by_technique_whatever_their_order():
    clip = {"class_path": "lite_ppo.callbacks.ClipHigher", "init_args": {"eps_high": 0.28}}
    agg = {"class_path": "lite_ppo.callbacks.LossAggregation", "init_args": {"mode": "token-mean"}}
    assert config_differences(_callbacks(clip, agg), _callbacks(agg, clip)) == []
    wider = {"class_path": "lite_ppo.callbacks.ClipHigher", "init_args": {"eps_high": 0.32}}
    assert config_differences(_callbacks(clip, agg), _callbacks(agg, wider)) == [
        ("trainer.callbacks.ClipHigher.eps_high", "0.28", "0.32")
    ]
    # A technique taken out and one added: one entry each (a removed technique's arguments follow from it).
    dynamic = {"class_path": "lite_ppo.callbacks.DynamicSampling"}
    assert config_differences(_callbacks(clip, agg), _callbacks(agg, dynamic)) == [
        ("trainer.callbacks.ClipHigher", "on", "-"),
        ("trainer.callbacks.DynamicSampling", "-", "on"),
    ]


def test_where_a_run_writes_resumes_from_and_its_derived_seeds_are_no_difference():
    earlier = {"trainer": {"logger": {"init_args": {"version": "seed3"}}, "default_root_dir": "a"}, "ckpt_path": None}
    now = {"trainer": {"logger": {"init_args": {"version": "seed3-1"}}, "default_root_dir": "b"}, "ckpt_path": "x"}
    assert config_differences(earlier, now) == []
    assert config_differences({"data": {"seed": 3, "size": 1}}, {"data": {"seed": 4, "size": 2}}) == [
        ("data.size", "1", "2")
    ]


def test_a_setting_that_is_null_on_one_side_and_a_mapping_on_the_other_shows_both():
    """``data.sources: null`` in the earlier config, a mapping given now: one entry with both values whole
    (it read ``None -> (unset)``, the new sources lost as entries under a differing key)."""
    earlier = {"data": {"sources": None, "prompts_per_step": 4}}
    now = {"data": {"sources": {"easy": "testbed:easy"}, "prompts_per_step": 4}}
    assert config_differences(earlier, now) == [("data.sources", "null", '{"easy": "testbed:easy"}')]


def test_the_description_names_the_first_few_and_counts_the_rest():
    differences = [(f"model.k{i}", i, i + 1) for i in range(7)]
    text = describe_differences(differences, limit=2)
    assert text == "model.k0 0 -> 1, model.k1 1 -> 2 and 5 more (diff the two config.yaml files)"


def test_the_earlier_namesake_is_the_newest_earlier_run_that_saved_a_config(tmp_path):
    for name in ("seed3", "seed3-1", "seed3-2", "seed30"):
        (tmp_path / name).mkdir()
    (tmp_path / "seed3" / "config.yaml").write_text("a: 1\n")
    (tmp_path / "seed30" / "config.yaml").write_text("a: 1\n")
    assert earlier_namesake(tmp_path / "seed3") is None  # a first run
    assert earlier_namesake(tmp_path / "seed3-2") == tmp_path / "seed3"  # seed3-1 saved none (failed start)
    (tmp_path / "seed3-1" / "config.yaml").write_text("a: 2\n")
    assert earlier_namesake(tmp_path / "seed3-2") == tmp_path / "seed3-1"
    assert earlier_namesake(tmp_path / "seed30-1") == tmp_path / "seed30"
