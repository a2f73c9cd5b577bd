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


def test_user_entropy_bonus_through_the_cli(tmp_path, tiny_model_path, monkeypatch):
    # The user's folder is importable (what PYTHONPATH=tests/user_technique does on the command line),
    # and nothing of it is inside the lite_ppo package.
    monkeypatch.syspath_prepend(str(USER_DIR))
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
            str(tmp_path),
            "--trainer.logger.init_args.save_dir",
            str(tmp_path / "tb"),
        ]
    )
    import entropy_bonus

    assert not entropy_bonus.__file__.startswith(str(REPO / "src")) and "lite_ppo" not in entropy_bonus.__name__
    scalars = read_scalars(tmp_path / "tb")
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
