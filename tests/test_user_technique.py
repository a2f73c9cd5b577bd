"""A technique that is not in the package, in a user's own file, enabled by class_path through the
CLI, logging its own scalars to TensorBoard (CONTRIBUTING.md, "Write a new technique as a callback")."""

from __future__ import annotations

import sys

import pytest

from helpers.fits import read_scalars
from helpers.paths import REPO
from lite_ppo.cli import main

pytestmark = pytest.mark.slow

USER_DIR = REPO / "tests" / "user_technique"


def _fit_with_user_folder(folder, out, monkeypatch) -> dict:
    """A 2-step tiny fit of Lite PPO + ``entropy_bonus.EntropyBonus`` imported from ``folder`` (what
    PYTHONPATH=<folder> does on the command line); its TensorBoard scalars."""
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, "entropy_bonus", raising=False)
    main(
        [
            "fit",
            "--config",
            str(REPO / "configs/recipes/lite_ppo.yaml"),
            "--config",
            str(USER_DIR / "lite_ppo_entropy_bonus.yaml"),
            "--config",
            str(REPO / "configs/models/tiny.yaml"),
            "--data.steps_per_epoch",
            "2",
            "--trainer.default_root_dir",
            str(out),
            "--trainer.logger.init_args.save_dir",
            str(out / "tb"),
        ]
    )
    import entropy_bonus

    # The user's file, nothing of it inside the lite_ppo package.
    assert entropy_bonus.__file__ == str(folder / "entropy_bonus.py") and "lite_ppo" not in entropy_bonus.__name__
    return read_scalars(out / "tb")


def test_user_entropy_bonus_through_the_cli(tmp_path, tiny_model_path, monkeypatch):
    scalars = _fit_with_user_folder(USER_DIR, tmp_path, monkeypatch)
    for tag in ("entropy_bonus/entropy", "entropy_bonus/coef", "loss/entropy_bonus"):
        assert len(scalars.get(tag, [])) == 2, f"{tag} not logged once per step: {sorted(scalars)}"
    policy_entropy = dict(scalars["policy/entropy"])
    for step, value in scalars["entropy_bonus/entropy"]:
        # The same token-weighted entropy the module reports, computed by the user's hook.
        assert value == pytest.approx(policy_entropy[step], rel=1e-4)
        assert value > 0
    assert all(v == pytest.approx(0.01) for _, v in scalars["entropy_bonus/coef"])
    total, policy = dict(scalars["loss/total"]), dict(scalars["loss/policy"])
    for step, bonus in scalars["loss/entropy_bonus"]:
        assert bonus < 0  # a bonus: it lowers the loss
        assert total[step] == pytest.approx(policy[step] + bonus, rel=1e-4, abs=1e-6)
        # -coef * (token mean of the entropy), up to how the mini-batches split the tokens
        assert -bonus / 0.01 == pytest.approx(policy_entropy[step], rel=0.1)


def test_a_technique_written_before_step_context_runs_the_same_with_one_deprecation_line(
    tmp_path, tiny_model_path, monkeypatch
):
    """CONTRIBUTING's example as it was written before hooks took ``ctx`` (``extra_loss_terms(self,
    trainer, module, ctx)``) still trains, through the adapter, to exactly the same scalars as today's,
    and the run says once what to rewrite."""
    with pytest.warns(
        FutureWarning,
        match=r"^EntropyBonus: hook signatures before StepContext .*: write extra_loss_terms\(self, ctx, minibatch\);",
    ):
        before = _fit_with_user_folder(USER_DIR / "before_step_context", tmp_path / "before", monkeypatch)
    now = _fit_with_user_folder(USER_DIR, tmp_path / "now", monkeypatch)
    compared = [tag for tag in now if tag.split("/")[0] in ("entropy_bonus", "loss", "policy", "clip", "reward")]
    assert "loss/entropy_bonus" in compared and sorted(before) == sorted(now)
    assert {tag: before[tag] for tag in compared} == {tag: now[tag] for tag in compared}
