"""ops/: hand-computed cases and properties (the equations of docs/method.md)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from lite_ppo.ops import (
    aggregate_loss,
    aggregation_denominator,
    clip_fractions,
    clipped_surrogate,
    entropy_from_logits,
    group_statistics,
    logprobs_from_logits,
    masked_mean,
    masked_std,
    normalized_advantages,
)
from lite_ppo.ops.group_outcomes import group_outcome_shares

# Two groups of three responses: g0 = [1, 0, 0], g1 = [1, 1, 0].
REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0])
GROUPS = torch.tensor([0, 0, 0, 1, 1, 1])
# By hand: group means 1/3 and 2/3; Bessel group std sqrt((4/9 + 1/9 + 1/9) / 2) = sqrt(1/3) for both;
# batch mean 1/2, batch std sqrt(6 * 0.25 / 5) = sqrt(0.3).
G_STD, B_STD = math.sqrt(1 / 3), math.sqrt(0.3)
EXPECTED = {
    ("group", "group"): [2 / 3 / G_STD, -1 / 3 / G_STD, -1 / 3 / G_STD, 1 / 3 / G_STD, 1 / 3 / G_STD, -2 / 3 / G_STD],
    ("group", "batch"): [2 / 3 / B_STD, -1 / 3 / B_STD, -1 / 3 / B_STD, 1 / 3 / B_STD, 1 / 3 / B_STD, -2 / 3 / B_STD],
    ("group", "none"): [2 / 3, -1 / 3, -1 / 3, 1 / 3, 1 / 3, -2 / 3],
    ("batch", "group"): [0.5 / G_STD, -0.5 / G_STD, -0.5 / G_STD, 0.5 / G_STD, 0.5 / G_STD, -0.5 / G_STD],
    ("batch", "batch"): [0.5 / B_STD, -0.5 / B_STD, -0.5 / B_STD, 0.5 / B_STD, 0.5 / B_STD, -0.5 / B_STD],
    ("batch", "none"): [0.5, -0.5, -0.5, 0.5, 0.5, -0.5],
    ("none", "group"): [1 / G_STD, 0, 0, 1 / G_STD, 1 / G_STD, 0],
    ("none", "batch"): [1 / B_STD, 0, 0, 1 / B_STD, 1 / B_STD, 0],
    ("none", "none"): [1, 0, 0, 1, 1, 0],
}


@pytest.mark.parametrize("scopes", sorted(EXPECTED))
def test_every_scope_pair_matches_hand_computation(scopes):
    mean_scope, std_scope = scopes
    got = normalized_advantages(REWARDS, GROUPS, mean_scope, std_scope, eps=1e-6)
    # eps = 1e-6 on a std of ~0.55 moves values by < 2e-6 relative.
    torch.testing.assert_close(got, torch.tensor(EXPECTED[scopes], dtype=torch.float32), rtol=1e-5, atol=1e-6)


def test_lite_ppo_mixed_normalization_uses_passed_global_batch_stats():
    got = normalized_advantages(
        REWARDS, GROUPS, "group", "batch", eps=0.0, batch_stats=(torch.tensor(0.0), torch.tensor(2.0))
    )
    torch.testing.assert_close(got, torch.tensor([2 / 3, -1 / 3, -1 / 3, 1 / 3, 1 / 3, -2 / 3]) / 2)


def test_zero_weight_excludes_a_response_from_statistics_but_not_from_advantages():
    # Exclude the last response of g1: g1's counted rewards are [1, 1] -> mean 1, std 0.
    weights = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 0.0])
    got = normalized_advantages(REWARDS, GROUPS, "group", "none", weights=weights)
    torch.testing.assert_close(got, torch.tensor([2 / 3, -1 / 3, -1 / 3, 0.0, 0.0, -1.0]))


def test_group_statistics_with_unordered_ids():
    ids = torch.tensor([7, 3, 7, 3])
    mean, std = group_statistics(torch.tensor([1.0, 2.0, 3.0, 6.0]), ids)
    torch.testing.assert_close(mean, torch.tensor([2.0, 4.0, 2.0, 4.0]))
    torch.testing.assert_close(std, torch.tensor([math.sqrt(2), math.sqrt(8), math.sqrt(2), math.sqrt(8)]))


def test_unknown_scope_is_rejected():
    with pytest.raises(ValueError, match="mean_scope"):
        normalized_advantages(REWARDS, GROUPS, "prompt", "batch")


# -- aggregation ------------------------------------------------------------------------------------
LOSS = torch.tensor([[1.0, 2.0, 3.0, 9.0], [4.0, 9.0, 9.0, 9.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])


def test_aggregations_by_hand():
    assert aggregate_loss(LOSS, MASK, "token-mean").item() == pytest.approx((1 + 2 + 3 + 4) / 4)
    assert aggregate_loss(LOSS, MASK, "seq-mean-token-mean").item() == pytest.approx((6 / 3 + 4 / 1) / 2)
    assert aggregate_loss(LOSS, MASK, "seq-mean-token-sum").item() == pytest.approx((6 + 4) / 2)


def test_split_micro_batches_with_global_denominator_add_up_to_the_whole():
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
        denom = aggregation_denominator(MASK, mode)
        parts = sum(aggregate_loss(LOSS[i : i + 1], MASK[i : i + 1], mode, denom) for i in range(2))
        assert parts.item() == pytest.approx(aggregate_loss(LOSS, MASK, mode).item())


def test_fully_masked_response_is_not_a_sequence():
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    assert aggregation_denominator(mask, "seq-mean-token-mean").item() == 1
    assert aggregate_loss(LOSS, mask, "seq-mean-token-mean").item() == pytest.approx(1.5)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 6), st.integers(1, 8), st.integers(0, 10_000))
def test_token_equals_sequence_aggregation_when_lengths_are_equal(rows, length, seed):
    g = torch.Generator().manual_seed(seed)
    loss = torch.randn(rows, length + 3, generator=g)
    mask = torch.zeros(rows, length + 3)
    mask[:, :length] = 1
    torch.testing.assert_close(
        aggregate_loss(loss, mask, "token-mean"), aggregate_loss(loss, mask, "seq-mean-token-mean")
    )


# -- clipped surrogate -------------------------------------------------------------------------------
def _logratio(ratios):
    return torch.log(torch.tensor(ratios)), torch.zeros(len(ratios))


def test_clipped_surrogate_by_hand_positive_and_negative_advantages():
    new, old = _logratio([[1.5, 0.5, 1.1]])
    pos, ratio = clipped_surrogate(new, old, torch.tensor([1.0]))
    # -min(rho * A, clip(rho) * A) with A = 1: -min(1.5, 1.2), -min(0.5, 0.8), -min(1.1, 1.1)
    torch.testing.assert_close(pos, torch.tensor([[-1.2, -0.5, -1.1]]))
    torch.testing.assert_close(ratio, torch.tensor([[1.5, 0.5, 1.1]]))
    neg, _ = clipped_surrogate(new, old, torch.tensor([-1.0]))
    # A = -1: -min(-1.5, -1.2) = 1.5, -min(-0.5, -0.8) = 0.8, 1.1
    torch.testing.assert_close(neg, torch.tensor([[1.5, 0.8, 1.1]]))


def test_clip_higher_raises_only_the_upper_bound():
    new, old = _logratio([[1.25, 1.35, 0.7]])
    loss, _ = clipped_surrogate(new, old, torch.tensor([2.0]), clip_low=0.2, clip_high=0.28)
    # A = 2: 1.25 < 1.28 stays; 1.35 clips to 1.28; 0.7 (< 0.8) keeps rho since min picks 0.7 * 2.
    torch.testing.assert_close(loss, torch.tensor([[-2.5, -2.56, -1.4]]))


def test_dual_clip_bounds_negative_advantage_loss():
    new, old = _logratio([[5.0, 2.0]])
    loss, _ = clipped_surrogate(new, old, torch.tensor([-1.0]), dual_clip=3.0)
    torch.testing.assert_close(loss, torch.tensor([[3.0, 2.0]]))
    pos, _ = clipped_surrogate(new, old, torch.tensor([1.0]), dual_clip=3.0)
    torch.testing.assert_close(pos, torch.tensor([[-1.2, -1.2]]))


def test_clip_fractions_by_hand():
    ratio = torch.tensor([[1.5, 0.5, 1.0, 1.2], [0.5, 1.5, 1.0, 9.0]])
    adv = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    f = clip_fractions(ratio, adv, mask, 0.2, 0.28)
    # 7 valid tokens. Row 0 (A>0): 1.5 > 1.28 upper-clipped; 0.5 below 0.8 but A>0 -> inactive.
    # Row 1 (A<0): 0.5 < 0.8 lower-clipped; 1.5 > 1.28 with A<0 -> inactive; 9.0 is masked.
    assert f["upper"].item() == pytest.approx(1 / 7)
    assert f["lower"].item() == pytest.approx(1 / 7)
    assert f["upper_inactive"].item() == pytest.approx(1 / 7)
    assert f["lower_inactive"].item() == pytest.approx(1 / 7)
    assert f["total"].item() == pytest.approx(2 / 7)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 5), st.integers(1, 6), st.integers(0, 10_000), st.floats(0.05, 0.3))
def test_clip_higher_with_equal_eps_is_symmetric_clipping(rows, length, seed, eps):
    g = torch.Generator().manual_seed(seed)
    new, old, adv = (
        torch.randn(rows, length, generator=g) * 0.3,
        torch.randn(rows, length, generator=g) * 0.3,
        torch.randn(rows, generator=g),
    )
    a, _ = clipped_surrogate(new, old, adv, clip_low=eps, clip_high=eps)
    # Independent form of symmetric PPO: max(-rho A, -clip(rho, 1-eps, 1+eps) A)
    rho = torch.exp(new - old)
    ref = torch.max(-rho * adv[:, None], -torch.clamp(rho, 1 - eps, 1 + eps) * adv[:, None])
    torch.testing.assert_close(a, ref)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 7), min_size=1, max_size=6), st.integers(0, 10_000))
def test_ratio_one_gives_minus_mean_advantage(lengths, seed):
    g = torch.Generator().manual_seed(seed)
    adv = torch.randn(len(lengths), generator=g)
    width = max(lengths) + 2
    mask = torch.zeros(len(lengths), width)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    logp = torch.randn(len(lengths), width, generator=g)
    loss, _ = clipped_surrogate(logp, logp.clone(), adv)
    lens = torch.tensor(lengths, dtype=torch.float32)
    token_weighted = -(adv * lens).sum() / lens.sum()
    torch.testing.assert_close(aggregate_loss(loss, mask, "token-mean"), token_weighted)
    torch.testing.assert_close(aggregate_loss(loss, mask, "seq-mean-token-mean"), -adv.mean())


# -- advantage properties ----------------------------------------------------------------------------
rewards_strategy = st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), min_size=8, max_size=8)


@settings(max_examples=60, deadline=None)
@given(rewards_strategy, rewards_strategy, st.floats(0.1, 10.0), st.floats(-5.0, 5.0))
def test_positive_affine_reward_transform_leaves_z_scores_unchanged(r0, r1, a, b):
    rewards = torch.tensor(r0 + r1, dtype=torch.float64)
    groups = torch.tensor([0] * 8 + [1] * 8)
    _, g_std = group_statistics(rewards, groups)
    assume(g_std.min() > 0.05)  # z-scores need a spread in every group
    for mean_scope, std_scope in [("group", "group"), ("batch", "batch"), ("group", "batch")]:
        base = normalized_advantages(rewards, groups, mean_scope, std_scope, eps=0.0)
        moved = normalized_advantages(a * rewards + b, groups, mean_scope, std_scope, eps=0.0)
        torch.testing.assert_close(moved, base, rtol=1e-4, atol=1e-4)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(-3, 3), min_size=1, max_size=4), st.integers(1, 6), st.sampled_from(["group", "batch", "none"])
)
def test_all_equal_groups_get_zero_advantage_under_group_centring(values, size, std_scope):
    rewards = torch.tensor([v for v in values for _ in range(size)])
    groups = torch.arange(len(values)).repeat_interleave(size)
    adv = normalized_advantages(rewards, groups, "group", std_scope)
    assert torch.all(adv.abs() < 1e-4)


# -- statistics and log-probs ------------------------------------------------------------------------
def test_masked_statistics_match_torch_on_the_selected_entries():
    x = torch.tensor([1.0, 5.0, 2.0, 8.0, 3.0])
    m = torch.tensor([1, 0, 1, 0, 1])
    assert masked_mean(x, m).item() == pytest.approx(2.0)
    assert masked_std(x, m).item() == pytest.approx(torch.tensor([1.0, 2.0, 3.0]).std().item())
    assert masked_mean(x, torch.zeros(5)).item() == 0.0


def test_logprobs_and_entropy_match_torch_distributions():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 11, generator=g)
    tokens = torch.randint(0, 11, (2, 3), generator=g)
    dist = torch.distributions.Categorical(logits=logits)
    torch.testing.assert_close(logprobs_from_logits(logits, tokens), dist.log_prob(tokens))
    torch.testing.assert_close(entropy_from_logits(logits), dist.entropy())


def test_group_outcome_shares_by_hand():
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    groups = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    shares = group_outcome_shares(rewards, groups)
    assert shares["all_correct"].item() == pytest.approx(0.25)
    assert shares["all_wrong"].item() == pytest.approx(0.5)
    assert shares["mixed"].item() == pytest.approx(0.25)


@pytest.mark.parametrize("dual_clip", [None, 3.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clip_fraction_is_the_share_of_tokens_whose_gradient_vanished(seed, dual_clip):
    """``total`` against autograd: the share of valid tokens with A != 0 whose loss has zero gradient
    with respect to their log-prob (the dual clip's tokens included)."""
    gen = torch.Generator().manual_seed(seed)
    new = (torch.randn(8, 12, generator=gen, dtype=torch.float64) * 1.5).requires_grad_()
    old = torch.randn(8, 12, generator=gen, dtype=torch.float64)
    adv = torch.randn(8, generator=gen, dtype=torch.float64)
    mask = (torch.rand(8, 12, generator=gen) > 0.2).to(torch.float64)
    loss, ratio = clipped_surrogate(new, old, adv, 0.2, 0.28, dual_clip)
    (grad,) = torch.autograd.grad((loss * mask).sum(), new)
    vanished = (grad == 0) & (mask > 0) & (adv.unsqueeze(-1) != 0)
    if dual_clip is not None:
        assert ((adv.unsqueeze(-1) < 0) & (ratio > dual_clip) & (mask > 0)).any(), "no dual-clipped token drawn"
    share = clip_fractions(ratio.detach(), adv, mask, 0.2, 0.28, dual_clip)["total"]
    assert share.item() == pytest.approx(vanished.sum().item() / mask.sum().item(), rel=1e-12)
