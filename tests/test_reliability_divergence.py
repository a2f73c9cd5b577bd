"""Divergence guard: NaN injected into the loss on the tiny model (a test technique), through the CLI.

A non-finite loss or gradient norm must skip the optimizer step (weights and optimizer state
unchanged, the step still counted), log ``update/skipped_steps``, let the run continue and never
save a NaN; N skipped steps in a row must stop the run with one line and a non-zero exit.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from helpers.fits import read_scalars
from helpers.reliability_faults import fit_with_faults
from lite_ppo.errors import UserError
from lite_ppo.metric_names import SKIPPED_STEPS
from lite_ppo.reliability.divergence import DivergenceGuard, TrainingDiverged


def _fit(tmp: Path, nan_steps: list[int], *extra: str) -> None:
    fit_with_faults(
        tmp,
        tmp / "ckpt",
        [{"class_path": "helpers.reliability_faults.NaNLoss", "init_args": {"steps": nan_steps}}],
        *extra,
    )


def _weights(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)


@pytest.mark.slow
def test_nan_loss_step_is_skipped_counted_and_the_run_continues(tmp_path, tiny_model_path):
    with pytest.warns(UserWarning, match="divergence guard: optimizer step 2 skipped"):
        _fit(tmp_path, nan_steps=[1])  # rollout step 1 (optimizer steps 2 and 3) gets a NaN loss

    scalars = read_scalars(tmp_path / "tb")
    assert [v for _, v in sorted(scalars[SKIPPED_STEPS])] == [0, 2, 2]  # both mini-batches of step 1

    ckpt = tmp_path / "ckpt"
    after_0, after_1, after_2 = (_weights(ckpt / f"epoch=0-step={s}.ckpt") for s in (2, 4, 6))
    # The skipped steps changed nothing: weights and Adam moments after step 1 equal those after step 0 ...
    for name, value in after_0["state_dict"].items():
        assert torch.equal(after_1["state_dict"][name], value), name
    for index, state in after_0["optimizer_states"][0]["state"].items():
        for key, value in state.items():
            assert torch.equal(
                torch.as_tensor(after_1["optimizer_states"][0]["state"][index][key]), torch.as_tensor(value)
            ), (index, key)
    # ... but they still counted (global step and LR schedule advance as in an unfaulted run),
    assert (after_0["global_step"], after_1["global_step"], after_2["global_step"]) == (2, 4, 6)
    # and the run went on learning afterwards, with finite weights everywhere.
    assert any(not torch.equal(after_2["state_dict"][n], v) for n, v in after_1["state_dict"].items())
    for state in (after_0, after_1, after_2, _weights(ckpt / "last.ckpt")):
        assert all(torch.isfinite(v).all() for v in state["state_dict"].values())


@pytest.mark.slow
def test_nan_steps_in_a_row_stop_the_run_with_one_line(tmp_path, tiny_model_path, capsys):
    with pytest.raises(SystemExit) as info:
        _fit(tmp_path, [0, 1, 2], "--divergence_guard.max_consecutive_skips=3")
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(
        "lite-ppo fit: error: divergence guard: 3 optimizer steps in a row had a non-finite loss or gradient norm"
    )
    # The streak began at optimizer step 0: the checkpoint saved at step 2 is after it, so none is named.
    assert err[-1].endswith("no checkpoint was saved before optimizer step 0: start the run again"), err[-1]
    # Nothing non-finite reached a checkpoint (none was due before the stop, none written at it).
    for path in (tmp_path / "ckpt").glob("*.ckpt") if (tmp_path / "ckpt").exists() else []:
        assert all(torch.isfinite(v).all() for v in _weights(path)["state_dict"].values())


@pytest.mark.slow
def test_an_exploding_finite_step_stops_and_names_the_checkpoint_before_it(tmp_path, tiny_model_path, capsys):
    """model.lr 1e20 for one optimizer step: every weight moves by ~1e20, all finite. The run stops at
    that step (optimizer step 4, the first of training step 2) and names the checkpoint saved after
    step 4 optimizer steps (checkpoints every 2), which holds the weights from before it."""
    fault = {"class_path": "helpers.reliability_faults.LearningRateAt", "init_args": {"step": 2, "lr": 1e20}}
    with pytest.raises(SystemExit) as info:
        fit_with_faults(tmp_path, tmp_path / "ckpt", [fault])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("lite-ppo fit: error: divergence guard: optimizer step 4 changed the weights' norm"), err
    assert f"--ckpt_path {tmp_path / 'ckpt' / 'epoch=0-step=4.ckpt'} (saved at optimizer step 4" in err, err
    # No checkpoint holds the exploded weights: every saved weight is of the scale of an initial one.
    saved = sorted((tmp_path / "ckpt").glob("*.ckpt"))
    assert {p.name for p in saved} == {"epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt", "last.ckpt"}
    for path in saved:
        assert max(float(v.abs().max()) for v in _weights(path)["state_dict"].values()) < 100, path


class _Module(torch.nn.Module):
    def __init__(self, value: float) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.tensor([1.0, value]))


def _trainer(metrics: dict | None = None) -> SimpleNamespace:
    return SimpleNamespace(world_size=1, global_step=7, callback_metrics=metrics or {}, strategy=None)


def test_non_finite_weights_are_never_saved():
    guard = DivergenceGuard()
    guard.on_save_checkpoint(_trainer(), _Module(2.0), {})  # finite: fine
    with pytest.raises(TrainingDiverged, match="parameter weight is not finite at optimizer step 7; not saving"):
        guard.on_save_checkpoint(_trainer(), _Module(float("inf")), {})


def test_skip_drops_the_gradients_and_counts():
    guard = DivergenceGuard(max_consecutive_skips=2)
    module = _Module(2.0)
    optimizer = torch.optim.AdamW(module.parameters(), lr=0.1)
    module.weight.grad = torch.tensor([1.0, 1.0])
    guard.observe_loss(torch.tensor(float("nan")))
    with pytest.warns(UserWarning, match="skipped"):
        assert guard.before_optimizer_step(_trainer(), optimizer, torch.tensor(3.0)) is True
    assert module.weight.grad is None
    optimizer.step()  # what the module does next: nothing changes
    assert torch.equal(module.weight.detach(), torch.tensor([1.0, 2.0])) and not optimizer.state
    guard.observe_loss(torch.tensor(1.0))
    assert guard.before_optimizer_step(_trainer(), optimizer, torch.tensor(1.0)) is False  # finite: resets the streak
    assert (guard.skipped_steps, guard.consecutive) == (1, 0)
    guard.observe_loss(torch.tensor(1.0))
    with pytest.warns(UserWarning):
        guard.before_optimizer_step(_trainer(), optimizer, torch.tensor(float("inf")))  # a non-finite norm alone
    guard.observe_loss(torch.tensor(1.0))
    with pytest.raises(TrainingDiverged, match="2 optimizer steps in a row"):
        guard.before_optimizer_step(_trainer(), optimizer, torch.tensor(float("nan")))


def test_weight_norm_factor_stops_a_step_that_grows_or_shrinks_the_weights_too_much():
    guard = DivergenceGuard(max_weight_norm_factor=2.0)
    module = _Module(0.0)  # weights [1, 0]: norm 1
    trainer = SimpleNamespace(**vars(_trainer()), checkpoint_callbacks=[])
    guard.on_train_start(trainer, module)
    for scale, stops in ((1.9, False), (1 / 1.9, False), (2.1, True), (1 / 2.1, True), (float("inf"), True)):
        guard._weight_norm = 1.0  # the norm before this step
        with torch.no_grad():
            module.weight.copy_(torch.tensor([scale, 0.0]))
        if stops:
            with pytest.raises(TrainingDiverged, match="no checkpoint was saved before optimizer step"):
                guard.after_optimizer_step(trainer, module)
        else:
            guard.after_optimizer_step(trainer, module)
    with pytest.raises(UserError, match="max_weight_norm_factor must be a number > 1"):
        DivergenceGuard(max_weight_norm_factor=1.0)


def test_alarms_warn_only_when_enabled_and_crossed():
    metrics = {
        "policy/approx_kl": torch.tensor(3145.0),
        "policy/entropy": torch.tensor(0.001),
        "policy/ratio_max": torch.tensor(1.1),
    }
    quiet = DivergenceGuard()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet._alarms(_trainer(metrics))
    loud = DivergenceGuard(alarm_approx_kl=1.0, alarm_entropy_min=0.01, alarm_ratio_max=10.0)
    with pytest.warns(UserWarning) as record:
        loud._alarms(_trainer(metrics))
    texts = [str(w.message) for w in record]
    assert any("approx KL 3145 > 1.0" in t for t in texts) and any("entropy 0.001 < 0.01" in t for t in texts)
    assert not any("importance ratio" in t for t in texts)
