"""The real-LM tier's configs (docs/transfer.md) compose after a recipe as its pilot protocol says: SmolLM2 on
vLLM in float32, 30 steps of 4 prompts x 8 samples, and per candidate task 1,000 held-out problems of
that task alone, the same for every seed and never among the training draws (instantiation only: no model
is loaded)."""

from __future__ import annotations

import pytest

from helpers.paths import REPO
from lite_ppo.callbacks import Evaluation, Rollout
from lite_ppo.cli.lightning_cli import TRAINER_DEFAULTS, LitePPOCLI
from lite_ppo.data.datamodule import MathDataModule
from lite_ppo.rollout import VLLMEngine
from lite_ppo.training.module import LitePPO

TASKS = {"synthetic_medium": "medium", "synthetic_hard": "hard", "paper_easy": "easy"}


def _cli(task: str, seed: int) -> LitePPOCLI:
    configs = ["recipes/lite_ppo.yaml", "models/smollm2_transfer.yaml", f"data/transfer_{task}.yaml"]
    args = [a for c in configs for a in ("--config", str(REPO / "configs" / c))]
    args += [f"--seed_everything={seed}", f"--data.seed={seed}"]  # as the sweep sets a seed
    return LitePPOCLI(
        LitePPO, MathDataModule, args=args, run=False, trainer_defaults={**TRAINER_DEFAULTS, "logger": False}
    )


@pytest.mark.parametrize("task", TASKS)
def test_a_candidate_task_composes_as_the_pilot_protocol_fixes_it(task):
    cli = _cli(task, 0)
    (rollout,) = [cb for cb in cli.trainer.callbacks if isinstance(cb, Rollout)]
    (evaluation,) = [cb for cb in cli.trainer.callbacks if isinstance(cb, Evaluation)]
    assert isinstance(rollout.engine, VLLMEngine) and rollout.engine.dtype == "float32"
    assert evaluation.evaluate_before_training
    assert cli.model.model_path == "builtin:smollm2-135m-instruct"
    assert cli.trainer.val_check_interval == 15
    data = cli.datamodule
    assert (data.prompts_per_step, data.steps_per_epoch) == (4, 30)
    assert list(data.sources) == [TASKS[task]]

    held_out = data.held_out()
    assert len(held_out) == 1000 and len({p.id for p in held_out}) == 1000
    again = _cli(task, 1).datamodule  # another training seed: the same problems held out
    assert [p.id for p in again.held_out()] == [p.id for p in held_out]
    trained = {p.id for k in range(30) for p in data.global_batch(k)}
    assert len(trained) > 4 * 25 and not trained & {p.id for p in held_out}
