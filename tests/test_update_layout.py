"""How the update lays out its forward passes — shared-prompt packing, token-budget micro-batches,
trimmed padding — changes the cost, never the result: same old log-probs, loss and update."""

from __future__ import annotations

import pytest
import torch

from helpers.update_steps import PROMPTS, RESPONSES, assert_same_update, batch, step
from lite_ppo.technique import Technique

# Equivalence to float rounding: .ci/run repeats these at the CPU dispatch level below this one.
pytestmark = pytest.mark.numerics


class ForwardSizes(Technique):
    """Token positions of every forward the policy's decoder runs with gradient (the training passes)."""

    def on_fit_start(self, trainer, pl_module):
        self.sizes = []

        def record(module, args, kwargs, output):
            if torch.is_grad_enabled():
                self.sizes.append(kwargs["input_ids"].numel())

        pl_module.policy.get_decoder().register_forward_hook(record, with_kwargs=True)


@pytest.mark.parametrize(("num_mini_batches", "checkpointing"), [(1, False), (2, False), (2, True)])
def test_packing_changes_the_cost_not_the_update(tiny_model_path, num_mini_batches, checkpointing):
    # Packed in one row (block attention), or a row per group under gradient checkpointing (dense mask).
    packed = step(
        tiny_model_path,
        batch(),
        num_mini_batches=num_mini_batches,
        pack_prompts=True,
        gradient_checkpointing=checkpointing,
        optimizer="sgd",
    )
    plain = step(tiny_model_path, batch(), num_mini_batches=num_mini_batches, pack_prompts=False, optimizer="sgd")
    assert_same_update(*packed, *plain)


def test_padding_efficiency_by_hand(tiny_model_path):
    # One micro-batch of all 8 rows. Unpacked: real prompt + response tokens over 8 rows x (4 + 5).
    _, plain = step(tiny_model_path, batch(), num_mini_batches=1, micro_batch_size=8, pack_prompts=False)
    assert plain.scalars["update/padding_efficiency"] == pytest.approx(
        (sum(PROMPTS) + sum(RESPONSES)) / (8 * 9), rel=1e-6
    )
    # Packed: the groups (prompt once + both responses: 8, 11, 10, 6 tokens) back to back in one row.
    sizes = ForwardSizes()
    _, packed = step(tiny_model_path, batch(), num_mini_batches=1, micro_batch_size=8, pack_prompts=True, extra=[sizes])
    assert sizes.sizes == [8 + 11 + 10 + 6]
    assert packed.scalars["update/padding_efficiency"] == 1.0
    # Under gradient checkpointing (dense mask), one row per group, padded to the longest (11).
    sizes = ForwardSizes()
    _, checkpointed = step(
        tiny_model_path,
        batch(),
        num_mini_batches=1,
        micro_batch_size=8,
        pack_prompts=True,
        gradient_checkpointing=True,
        extra=[sizes],
    )
    assert sizes.sizes == [4 * 11]
    assert checkpointed.scalars["update/padding_efficiency"] == pytest.approx((8 + 11 + 10 + 6) / (4 * 11), rel=1e-6)


def test_token_budget_micro_batches_keep_the_update_and_the_budget(tiny_model_path):
    sizes = ForwardSizes()
    budget = step(
        tiny_model_path,
        batch(),
        num_mini_batches=1,
        pack_prompts=False,
        micro_batch_tokens=20,
        extra=[sizes],
        optimizer="sgd",
    )
    count = step(tiny_model_path, batch(), num_mini_batches=1, pack_prompts=False, micro_batch_size=3, optimizer="sgd")
    assert_same_update(*budget, *count)
    # By hand: (prompt, response) per row (2,5) (2,1) (4,3) (4,4) (3,2) (3,5) (2,3) (2,1); longest first,
    # greedily while rows x (longest prompt + longest response) <= 20: rows {3,5} 2x(4+5), {0,2} 2x(4+5),
    # {6,4,1} 3x(3+3), {7} 1x(2+1). Each pass is trimmed to exactly that.
    assert sizes.sizes == [18, 18, 18, 3]
    # Sorted by length, the budget wastes less than a fixed count of 3 rows padded to the longest.
    assert budget[1].scalars["update/padding_efficiency"] > count[1].scalars["update/padding_efficiency"]


def test_packed_token_budget_sums_the_groups_of_a_pass(tiny_model_path):
    sizes = ForwardSizes()
    budget = step(
        tiny_model_path,
        batch(),
        num_mini_batches=1,
        pack_prompts=True,
        micro_batch_tokens=19,
        extra=[sizes],
        optimizer="sgd",
    )
    plain = step(tiny_model_path, batch(), num_mini_batches=1, pack_prompts=False, optimizer="sgd")
    assert_same_update(*budget, *plain)
    # Packed groups of 8, 11, 10, 6 tokens, longest first, while the *sum* fits in 19 (one row, no
    # padding): {11}, {10, 8}, {6}. Budgeted as padded rows (n x longest) it would be {11}, {10}, {8, 6}.
    assert sizes.sizes == [11, 18, 6]


@pytest.mark.parametrize(("split", "sizes"), [("group", [18, 17]), ("row", [24, 22])])
def test_group_mini_batches_compute_each_prompt_once_per_update(tiny_model_path, split, sizes):
    forwards = ForwardSizes()
    module, _ = step(
        tiny_model_path, batch(), num_mini_batches=2, micro_batch_size=8, mini_batch_split=split, extra=[forwards]
    )
    # Packed groups (prompt once + the mini-batch's responses of the group), in one row.
    # group: groups {0, 2} then {1, 3}: 2+5+1 + 3+2+5 = 18; 4+3+4 + 2+3+1 = 17. Each prompt
    # appears once in the update.
    # row: rows {0, 2, 4, 6} then {1, 3, 5, 7}, one response of every group in each:
    # 2+5 + 4+3 + 3+2 + 2+3 = 24; 2+1 + 4+4 + 3+5 + 2+1 = 22. Every prompt appears twice.
    assert forwards.sizes == sizes
    assert module.policy_version == 2
