"""What sets two runs of one name apart: the settings in which their saved configs differ.

A second run of a recipe, model and seed lands in ``seed<S>-1`` (:mod:`lite_ppo.research.run_naming`),
whatever it changed. ``lite-ppo fit`` then says at start how its config differs from the newest earlier
run of that name, so a run with ``--model.lr 1e-5`` is told apart from a plain repeat. The configs are
compared as ``compare`` tells groups apart (:func:`lite_ppo.research.runs.experiment_config`,
:func:`~lite_ppo.research.runs.flatten_config`): seeds and output paths left out, techniques by name.

Example:
    >>> clip = {"class_path": "a.ClipHigher", "init_args": {"eps_high": 0.28}}
    >>> earlier = {"model": {"lr": 1e-4}, "trainer": {"callbacks": [clip]}}
    >>> now = {"model": {"lr": 1e-5}, "trainer": {"callbacks": [{"class_path": "a.LossAggregation"}]}}
    >>> for key, old, new in config_differences(earlier, now):  # techniques first (shallowest keys)
    ...     print(key, old, new)
    trainer.callbacks.ClipHigher on -
    trainer.callbacks.LossAggregation - on
    model.lr 0.0001 1e-05
"""

from __future__ import annotations

from lite_ppo.research.runs import differing_keys, experiment_config, flatten_config, label_value

__all__ = ["config_differences", "describe_differences"]


def config_differences(earlier: dict, now: dict) -> list[tuple[str, str, str]]:
    """``(key, earlier value, value now)`` for every setting that differs, as ``compare`` tells groups apart
    (:func:`~lite_ppo.research.runs.differing_keys`, values as :func:`~lite_ppo.research.runs.label_value`
    shows them: a setting only one side has reads ``-``, a section that is a mapping on one side its entries)."""
    flats = [flatten_config(experiment_config(earlier)), flatten_config(experiment_config(now))]
    return [(k, label_value(flats[0], k), label_value(flats[1], k)) for k in differing_keys(flats)]


def describe_differences(differences: list[tuple[str, str, str]], limit: int = 5) -> str:
    """``key old -> new, ...``: the first ``limit`` of them, then how many more."""
    parts = [f"{key} {old} -> {new}" for key, old, new in differences[:limit]]
    more = len(differences) - limit
    return ", ".join(parts) + (f" and {more} more (diff the two config.yaml files)" if more > 0 else "")
