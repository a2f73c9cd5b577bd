"""The module's declared hand-off from generation (lite_ppo.training.rollout_source): a fit without a
rollout source, or with two, stops at setup with one line, before any weights load; the step's
batch is the source's, and validation's is returned as the step's outputs."""

from __future__ import annotations

import pytest
import torch
from lightning.pytorch import Trainer
from torch.utils.data import DataLoader

from helpers.given_rollouts import GivenRollouts
from helpers.technique_fit import rollout
from lite_ppo import LitePPO
from lite_ppo.callbacks import AdvantageNormalization, LossAggregation
from lite_ppo.errors import UserError
from lite_ppo.policy_module import rollout_of
from lite_ppo.training.rollout_source import NO_SOURCE


@pytest.fixture
def no_weights(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model's weights were loaded before the rollout source was checked")

    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained", refuse)


def _fit(callbacks: list, tiny_model_path: str) -> LitePPO:
    module = LitePPO(model_path=tiny_model_path, num_mini_batches=1, micro_batch_size=4)
    trainer = Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        logger=False,
        callbacks=[AdvantageNormalization(), LossAggregation(), *callbacks],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, train_dataloaders=DataLoader([{"rollout": rollout()}], batch_size=None))
    return module


def test_a_fit_without_a_rollout_source_stops_at_setup(tiny_model_path, no_weights):
    with pytest.raises(UserError) as error:
        _fit([], tiny_model_path)
    assert str(error.value) == NO_SOURCE and "\n" not in NO_SOURCE and "lite_ppo.callbacks.Rollout" in NO_SOURCE


def test_two_rollout_sources_are_refused_naming_both(tiny_model_path, no_weights):
    with pytest.raises(UserError, match="two rollout sources in trainer.callbacks .GivenRollouts and GivenRollouts."):
        _fit([GivenRollouts(), GivenRollouts()], tiny_model_path)


class Seen(GivenRollouts):
    """A source that records what it handed out and what the step returned."""

    def __init__(self) -> None:
        super().__init__()
        self.given, self.outputs = [], []

    def training_rollout(self, trainer, module, batch, batch_idx):
        self.given.append(super().training_rollout(trainer, module, batch, batch_idx))
        return self.given[-1]

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.outputs.append(rollout_of(outputs))


def test_the_step_trains_on_the_sources_batch_and_returns_it_updated(tiny_model_path):
    source = Seen()
    _fit([source], tiny_model_path)
    (given,), (out,) = source.given, source.outputs
    assert given.advantages is None and out.advantages is not None  # stage 2 ran on the source's batch
    assert out.input_ids is given.input_ids and out.rewards is given.rewards  # the same responses, not a copy
    # One mini-batch, reuse_first: the old log-probs are the start policy's (a second copy scores them).
    reference = LitePPO(model_path=tiny_model_path, num_mini_batches=1, micro_batch_size=4)
    reference.configure_model()
    torch.testing.assert_close(out.old_logprobs, reference.sequence_logprobs(given), atol=1e-5, rtol=1e-5)
