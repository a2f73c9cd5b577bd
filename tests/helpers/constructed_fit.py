"""A fixed rollout batch through one real training step of the tiny model, with given techniques."""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch
from lightning.pytorch.loggers import TensorBoardLogger

from helpers.fits import fit_one_batch, read_scalars
from lite_ppo.callbacks import Diagnostics
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.technique import Technique
from lite_ppo.training.module import LitePPO

V = 128  # vocabulary of the fake policy
# Four responses, two groups (g0 easy, g1 hard); rows 0 and 2 truncated at the width 3.
RATIOS = [1.5, 0.5, 1.1, 1.0]
ADVANTAGES = [1.0, -1.0, 1.0, -1.0]
LENGTHS = [3, 2, 3, 1]
RESPONSES = [[7, 7, 7], [7, 8, 0], [7, 8, 9], [9, 0, 0]]


def _logit(ratio: float) -> float:
    """Logit x of the sampled token (others 0) such that softmax_x / (1 / V) equals ``ratio``."""
    return math.log(ratio * (V - 1) / (V - ratio))


def entropy_at_ratio(ratio: float) -> float:
    """Entropy of the fake policy's distribution at a token whose ratio to the uniform one is ``ratio``."""
    x = _logit(ratio)
    z = math.exp(x) + V - 1
    return math.log(z) - math.exp(x) / z * x


class FakePolicy(torch.nn.Module):
    """Uniform logits when called without gradient (the module's old log-probs), and, with gradient,
    logit x_row on the token that actually follows (read from the input), so the ratio of every
    token of row i is exactly RATIOS[i]. The row is identified by its prompt token (100 + i)."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(()))  # something for the optimizer; shifts no softmax
        self.register_buffer("x", torch.tensor([_logit(r) for r in RATIOS]))

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False, logits_to_keep=0):
        b, t = input_ids.shape
        logits = torch.zeros(b, t, V) + self.bias
        if torch.is_grad_enabled():
            nxt = torch.cat([input_ids[:, 1:], input_ids[:, -1:]], dim=1)
            rows = input_ids[:, 0] - 100
            logits = logits + self.x[rows].view(b, 1, 1) * torch.nn.functional.one_hot(nxt, V).float()
        return SimpleNamespace(logits=logits[:, -logits_to_keep:])


class FixedAdvantages(Technique):
    def compute_advantages(self, ctx, batch):
        return torch.tensor(ADVANTAGES)


def constructed_batch() -> RolloutBatch:
    n, width = 4, 3
    response_ids = torch.tensor(RESPONSES)
    response_mask = (torch.arange(width).unsqueeze(0) < torch.tensor(LENGTHS).unsqueeze(1)).float()
    input_ids = torch.cat([torch.arange(100, 100 + n).unsqueeze(1), response_ids], dim=1)
    attention_mask = torch.cat([torch.ones(n, 1, dtype=torch.long), response_mask.long()], dim=1)
    return RolloutBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        response_mask=response_mask,
        group_ids=torch.tensor([0, 0, 1, 1]),
        rewards=torch.tensor([1.0, 0.0, 1.0, 1.0]),
        truncated=torch.tensor([True, False, True, False]),
        response_lengths=torch.tensor(LENGTHS),
        extras={"tier": ["easy", "easy", "hard", "hard"]},
        reward_status=["correct", "wrong", "correct", "correct"],
    )


def fit_constructed(tmp_path, *techniques: Technique, batch: RolloutBatch | None = None):
    # FakePolicy: lr moves no ratio. It answers the no-gradient old-log-prob pass differently from the
    # training forward (that is how it sets the ratios), so the old log-probs must come from that pass.
    module = LitePPO(lr=1e-6, num_mini_batches=1, micro_batch_size=4, max_grad_norm=None, old_logprobs="recompute")
    module.policy = FakePolicy()
    techniques = [FixedAdvantages(), *techniques, Diagnostics(ngram=2, repetition_window=None)]
    logger = TensorBoardLogger(str(tmp_path), name="diag", version="v")
    fit_one_batch(module, batch if batch is not None else constructed_batch(), techniques, logger=logger)
    return {tag: values[-1][1] for tag, values in read_scalars(tmp_path).items()}, tmp_path
