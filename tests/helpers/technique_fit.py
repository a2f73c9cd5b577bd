"""One real training step of :class:`LitePPO` on the tiny random model with a hand-made rollout, for
testing a technique through the hook path (``Trainer.fit``, the module's update, the logged scalars).

The rollout: 3 prompts with groups of 2, 3 and 1 responses (a group of one included), responses of
4, 2 | 3, 1, 5 | 2 tokens, the 5-token one truncated (no EOS), rewards 1, 0 | 1, 1, 0 | 1.
"""

from __future__ import annotations

import torch
from lightning.pytorch.loggers import TensorBoardLogger

from helpers.fits import fit_one_batch, read_scalars
from lite_ppo import LitePPO
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.rollout.engine import Generation
from lite_ppo.rollout.producer import build_rollout_batch
from lite_ppo.technique import Technique

PROMPTS = [[5, 6], [9, 10, 11], [7]]
RESPONSES = [[[10, 17, 24, 31], [38, 45]], [[66, 73, 80], [94], [12, 19, 26, 33, 40]], [[50, 57]]]
FINISHED = [[True, True], [True, True, False], [True]]
REWARDS = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
GROUPS = [0, 0, 1, 1, 1, 2]
LENGTHS = [4, 2, 3, 1, 5, 2]
TRUNCATED = [False, False, False, False, True, False]


def rollout() -> RolloutBatch:
    """The rollout above, laid out by the rollout producer's own ``build_rollout_batch``."""
    generations = [[Generation(r, f) for r, f in zip(rs, fs)] for rs, fs in zip(RESPONSES, FINISHED)]
    return build_rollout_batch(PROMPTS, generations, REWARDS, pad_id=2, temperature=1.0)


class Record(Technique):
    """Records, per micro-batch, what ``extra_loss_terms`` sees (entropy, loss mask, log-probs, old
    log-probs, advantages), and the final batch and the step's scalars at ``on_update_end``."""

    def __init__(self) -> None:
        self.micro: list[dict[str, torch.Tensor]] = []
        self.steps: list[dict[str, float]] = []

    def extra_loss_terms(self, ctx, minibatch):
        b = minibatch.batch
        self.micro.append(
            {
                "entropy": minibatch.entropy.detach().clone(),
                "logprobs": minibatch.logprobs.detach().clone(),
                "old_logprobs": b.old_logprobs.detach().clone(),
                "loss_mask": b.loss_mask.detach().clone(),
                "advantages": b.advantages.detach().clone(),
            }
        )
        return {}

    def on_update_end(self, ctx, batch, stats):
        self.batch = batch
        self.steps.append({k: float(v) for k, v in stats.scalars.items()})


def fit_step(model_path: str, techniques: list[Technique], log_dir=None, **module_args) -> Record:
    """One training step (``num_mini_batches=1`` unless given: the ratio is exactly 1, since the
    step's only mini-batch takes its old log-probs from its own forward) in micro-batches of 4 rows
    (2 micro-batches: the loss denominators must be the step's). Returns the recorder; with
    ``log_dir``, the TensorBoard scalars are written there too."""
    args = {"lr": 1e-3, "num_mini_batches": 1, "micro_batch_size": 4, "max_grad_norm": None, **module_args}
    torch.manual_seed(0)
    module = LitePPO(model_path=model_path, **args)
    record = Record()
    logger = TensorBoardLogger(str(log_dir), name="run", version="v") if log_dir is not None else False
    fit_one_batch(module, rollout(), [*techniques, record], logger=logger)
    return record


def logged(log_dir) -> dict[str, float]:
    """The last value of every scalar written under ``log_dir``."""
    return {tag: values[-1][1] for tag, values in read_scalars(log_dir).items()}
