"""``seed_everything`` seeds the data order and the rollout sampling unless ``data.seed`` /
``rollout.seed`` are set: before, ``lite-ppo fit --seed_everything 7`` trained on seed 42's batches
with seed 42's sampling seeds (both defaulted to 42 on their own)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from lightning.pytorch import Callback, seed_everything

from helpers.fits import tiny_fit_args
from lite_ppo.callbacks import Rollout
from lite_ppo.cli import main
from lite_ppo.data.datamodule import MathDataModule
from lite_ppo.data.seeding import DEFAULT_SEED, run_seed
from lite_ppo.rollout import HFEngine


def _questions(dm: MathDataModule) -> list[str]:
    return [problem.problem for problem in dm.global_batch(0)]


def test_unset_seeds_follow_the_global_seed(monkeypatch):
    monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)
    assert run_seed(None) == DEFAULT_SEED == MathDataModule(prompts_per_step=4).seed
    seed_everything(7, verbose=False)
    follows, explicit = MathDataModule(prompts_per_step=4), MathDataModule(prompts_per_step=4, seed=7)
    assert follows.seed == 7 and _questions(follows) == _questions(explicit)
    assert _questions(follows) != _questions(MathDataModule(prompts_per_step=4, seed=DEFAULT_SEED))
    assert Rollout(engine=HFEngine()).seed == 7
    # An explicit seed wins, and a resolved one stays fixed for the run.
    assert MathDataModule(seed=3).seed == 3 and Rollout(engine=HFEngine(), seed=3).seed == 3
    seed_everything(8, verbose=False)
    assert follows.seed == 7


class SeedProbe(Callback):
    """Writes the seeds the run's data module and rollout callback use to ``path`` at fit start."""

    def __init__(self, path: str) -> None:
        self.path = path

    def on_train_start(self, trainer, pl_module) -> None:
        rollout = next(cb for cb in trainer.callbacks if isinstance(cb, Rollout))
        seeds = {"data": trainer.datamodule.seed, "rollout": rollout.seed}
        Path(self.path).write_text(json.dumps(seeds))
        trainer.should_stop = True


@pytest.mark.parametrize(
    ("extra", "expected"),
    [((), {"data": 7, "rollout": 7}), (("--data.seed", "3"), {"data": 3, "rollout": 7})],
    ids=["follow", "explicit-data-seed"],
)
def test_fit_seed_everything_seeds_data_and_sampling(tmp_path, tiny_model_path, monkeypatch, extra, expected):
    monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)
    probe = tmp_path / "seeds.json"
    main(
        tiny_fit_args(
            tmp_path,
            "--seed_everything", "7",
            "--trainer.callbacks+=test_seeds.SeedProbe",
            f"--trainer.callbacks.path={probe}",
            *extra,
        )
    )  # fmt: skip
    assert json.loads(probe.read_text()) == expected
    # The saved config says which seeds ran (null would leave the reader to know the rule).
    saved = yaml.safe_load(next(tmp_path.rglob("config.yaml")).read_text())
    assert {"data": saved["data"]["seed"], "rollout": saved["rollout"]["seed"]} == expected
