"""The technique callbacks and their pure functions: hand-computed cases and properties."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from helpers.technique_batches import CaptureModule, make_batch, step_ctx
from lite_ppo.callbacks import (
    SAPO,
    AdvantageNormalization,
    ClipHigher,
    DynamicSampling,
    EntropyBonus,
    KLCov,
    KLPenalty,
    LossAggregation,
    OverlongFilter,
    OverlongRewardShaping,
    ReinforcePlusPlus,
)
from lite_ppo.errors import UserError
from lite_ppo.ops import aggregate_loss, clipped_surrogate, normalized_advantages
from lite_ppo.ops.advantages import weighted_mean_std
from lite_ppo.ops.dynamic_sampling import mixed_group_mask
from lite_ppo.ops.kl import kl_estimate
from lite_ppo.ops.overlong import overlong_penalty
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.rollout.engine import SamplingConfig
from lite_ppo.rollout.settings import RunSettings
from lite_ppo.step_metrics import StepMetrics
from lite_ppo.strategies.ranks import Ranks
from lite_ppo.technique import MiniBatchContext, PolicyLossConfig, Technique, advantage_estimator, build_loss_config

# -- helpers -------------------------------------------------------------------------------------------


# -- Clip-Higher ---------------------------------------------------------------------------------------
def test_clip_higher_sets_the_upper_bound_and_optional_dual_clip():
    cfg = build_loss_config(PolicyLossConfig(), [ClipHigher(0.2, 0.28)])
    assert (cfg.clip_low, cfg.clip_high, cfg.dual_clip) == (0.2, 0.28, None)
    # The lower clip comes from the module's clip_eps (the base config) when eps_low is null.
    cfg = build_loss_config(
        PolicyLossConfig(0.1, 0.1), [ClipHigher(eps_high=0.3, dual_clip=3.0), LossAggregation("seq-mean-token-mean")]
    )
    assert (cfg.clip_low, cfg.clip_high, cfg.dual_clip, cfg.aggregation) == (0.1, 0.3, 3.0, "seq-mean-token-mean")


def test_clip_higher_lower_bound_disagreeing_with_clip_eps_is_refused():
    # model.clip_eps = 0.2 (the base config) and ClipHigher(eps_low=0.1): two sources of one bound.
    with pytest.raises(UserError, match=r"lower clip to 0.1 but model.clip_eps is 0.2.*set model.clip_eps: 0.1"):
        build_loss_config(PolicyLossConfig(0.2, 0.2), [ClipHigher(eps_low=0.1, eps_high=0.3)])


def test_clip_higher_loss_by_hand():
    # A = +1, ratio 1.25: symmetric 0.2 clips at 1.2 (loss -1.2); eps_high 0.28 leaves it (-1.25).
    # A = -1, ratio 5 with dual clip c = 3: max(5, 1.28) = 5, bounded by c * |A| = 3.
    logp = torch.log(torch.tensor([[1.25, 5.0]]))
    old = torch.zeros(1, 2)
    adv = torch.tensor([[1.0, -1.0]])
    sym = build_loss_config(PolicyLossConfig(), [])
    high = build_loss_config(PolicyLossConfig(), [ClipHigher(0.2, 0.28, dual_clip=3.0)])
    loss_sym, _ = clipped_surrogate(logp, old, adv, sym.clip_low, sym.clip_high, sym.dual_clip)
    loss_high, _ = clipped_surrogate(logp, old, adv, high.clip_low, high.clip_high, high.dual_clip)
    torch.testing.assert_close(loss_sym, torch.tensor([[-1.2, 5.0]]))
    torch.testing.assert_close(loss_high, torch.tensor([[-1.25, 3.0]]))


@settings(max_examples=40, deadline=None)
@given(st.floats(0.01, 0.5), st.integers(0, 10_000))
def test_clip_higher_with_equal_eps_equals_symmetric_clipping(eps, seed):
    gen = torch.Generator().manual_seed(seed)
    logp, old = torch.randn(4, 6, generator=gen) * 0.5, torch.randn(4, 6, generator=gen) * 0.5
    adv = torch.randn(4, generator=gen)
    sym = build_loss_config(PolicyLossConfig(clip_low=eps, clip_high=eps), [])
    high = build_loss_config(PolicyLossConfig(clip_low=eps, clip_high=0.2), [ClipHigher(eps_low=eps, eps_high=eps)])
    a, _ = clipped_surrogate(logp, old, adv, sym.clip_low, sym.clip_high, sym.dual_clip)
    b, _ = clipped_surrogate(logp, old, adv, high.clip_low, high.clip_high, high.dual_clip)
    assert torch.equal(a, b)


def test_clip_higher_rejects_bad_values():
    with pytest.raises(ValueError, match="eps_low"):
        ClipHigher(eps_low=1.0)
    with pytest.raises(ValueError, match="dual_clip"):
        ClipHigher(dual_clip=0.5)


# -- conflicts name both classes -----------------------------------------------------------------------
class OtherEstimator(Technique):
    def compute_advantages(self, ctx, batch):
        return batch.rewards


def test_two_normalizers_fail_naming_both():
    with pytest.raises(ValueError, match="AdvantageNormalization and OtherEstimator"):
        advantage_estimator([AdvantageNormalization(), ClipHigher(), OtherEstimator()])


def test_two_aggregations_fail_naming_both():
    class SeqAggregation(LossAggregation):
        pass

    with pytest.raises(ValueError, match="LossAggregation and SeqAggregation.*'aggregation'"):
        build_loss_config(
            PolicyLossConfig(), [LossAggregation("token-mean"), ClipHigher(), SeqAggregation("seq-mean-token-mean")]
        )


def test_two_clip_settings_fail_naming_both():
    class MyClip(ClipHigher):
        pass

    with pytest.raises(ValueError, match="ClipHigher and MyClip"):
        build_loss_config(PolicyLossConfig(), [ClipHigher(), MyClip()])


# -- overlong reward shaping ---------------------------------------------------------------------------
def test_overlong_penalty_by_hand():
    # L_max = 20, L_buf = 4: 0 up to 16, then (16 - L) / 4, -1 at 20 and beyond.
    lengths = torch.tensor([0, 10, 16, 17, 18, 19, 20, 25])
    got = overlong_penalty(lengths, max_length=20, buffer_length=4, factor=1.0)
    torch.testing.assert_close(got, torch.tensor([0.0, 0.0, 0.0, -0.25, -0.5, -0.75, -1.0, -1.0]))
    torch.testing.assert_close(overlong_penalty(lengths, 20, 4, factor=0.5), got * 0.5)


@pytest.mark.parametrize("max_length,buffer", [(20, 4), (8192, 1638), (16, 16), (5, 1)])
def test_overlong_penalty_is_continuous_at_both_buffer_ends(max_length, buffer):
    start = max_length - buffer
    h = 1e-4
    at = lambda x: float(overlong_penalty(torch.tensor([x], dtype=torch.float64), max_length, buffer)[0])  # noqa: E731
    assert at(start - h) == 0.0 and at(start) == 0.0
    assert at(start + h) == pytest.approx(0.0, abs=2 * h / buffer)
    assert at(max_length - h) == pytest.approx(-1.0, abs=2 * h / buffer)
    assert at(max_length) == -1.0 and at(max_length + h) == -1.0


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 64), st.integers(1, 64), st.lists(st.integers(0, 200), min_size=2, max_size=20))
def test_overlong_penalty_is_non_increasing_and_bounded(max_length, buffer, lengths):
    buffer = min(buffer, max_length)
    sorted_lengths = torch.tensor(sorted(lengths))
    pen = overlong_penalty(sorted_lengths, max_length, buffer)
    assert bool((pen[1:] <= pen[:-1] + 1e-7).all())
    assert bool(((pen <= 0) & (pen >= -1)).all())


def test_overlong_shaping_reads_max_length_from_the_rollout_and_edits_rewards():
    trainer = SimpleNamespace(world_size=1, global_rank=0, callbacks=[])
    settings = RunSettings(SamplingConfig(n=2, max_new_tokens=10), SamplingConfig(n=1), "HFEngine", False)
    module = CaptureModule(trainer)
    batch = make_batch([1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1], [3, 8, 9, 10], truncated=[False, False, False, True])
    shaping = OverlongRewardShaping(buffer_length=4, factor=0.5)  # penalty from L = 6: (6 - L) / 4
    shaping.configure_run(settings)  # max_length from the rollout's max_new_tokens
    assert shaping.resolve(10) == (10, 4)
    metrics = StepMetrics()
    term = shaping.shape_rewards(step_ctx(trainer, module, metrics), batch)
    torch.testing.assert_close(batch.rewards + term, torch.tensor([1.0, 0.0 - 0.5 * 0.5, 1.0 - 0.5 * 0.75, 0.0 - 0.5]))
    assert batch.rewards.tolist() == [1.0, 0.0, 1.0, 0.0]  # the hook returns the term, the batch is untouched
    logged = metrics.compute(Ranks(None))
    assert float(logged["overlong_shaping/penalized_share"]) == pytest.approx(0.75)
    assert float(logged["overlong_shaping/penalty_mean"]) == pytest.approx(-(0.25 + 0.375 + 0.5) / 4)
    # buffer from the fraction: round(0.2 * 10) = 2
    assert OverlongRewardShaping().resolve(10) == (10, 2)
    with pytest.raises(ValueError, match="exceeds"):
        OverlongRewardShaping(buffer_length=11).configure_run(settings)
    with pytest.raises(ValueError, match="max_length is null"):
        OverlongRewardShaping().resolve(None)


# -- overlong filtering --------------------------------------------------------------------------------
def test_overlong_filter_masks_truncated_rows_after_advantages():
    batch = make_batch([1.0, 0.0, 0.0, 1.0], [0, 0, 1, 1], [2, 4, 4, 3], truncated=[False, True, True, False])
    module = CaptureModule()
    norm = AdvantageNormalization("group", "none")
    batch.advantages = norm.compute_advantages(step_ctx(module.trainer, module), batch)
    metrics = StepMetrics()
    mask = OverlongFilter().loss_mask(step_ctx(module.trainer, module, metrics), batch)
    assert (batch.loss_mask * mask).sum(-1).tolist() == [2.0, 0.0, 0.0, 3.0]
    assert batch.loss_mask.sum(-1).tolist() == [2.0, 4.0, 4.0, 3.0]  # the hook returns the mask, the batch is untouched
    logged = metrics.compute(Ranks(None))
    assert float(logged["overlong_filter/masked_response_share"]) == 0.5
    assert float(logged["overlong_filter/masked_token_share"]) == pytest.approx(8 / 13)


def test_truncated_advantage_never_reaches_the_loss():
    # The truncated response has a large advantage; with the filter the loss (and its gradient)
    # equal those of the batch without it, for both aggregations.
    batch = make_batch([1.0, 0.0, 0.0, 1.0], [0, 0, 0, 0], [2, 4, 3, 3], truncated=[False, True, False, False])
    batch.advantages = torch.tensor([0.5, -7.0, -0.5, 0.5])
    batch.loss_mask = batch.loss_mask * OverlongFilter().loss_mask(
        step_ctx(None, CaptureModule(), StepMetrics()), batch
    )
    logp = torch.randn(4, 4, requires_grad=True)
    loss_rows, _ = clipped_surrogate(logp, torch.zeros(4, 4), batch.advantages)
    keep = torch.tensor([0, 2, 3])
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
        filtered = aggregate_loss(loss_rows, batch.loss_mask, mode)
        reference = aggregate_loss(loss_rows[keep], batch.response_mask[keep], mode)
        torch.testing.assert_close(filtered, reference)
        (grad,) = torch.autograd.grad(filtered, logp, retain_graph=True)
        assert torch.all(grad[1] == 0)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=8))
def test_overlong_filter_without_truncation_changes_nothing(lengths):
    batch = make_batch(torch.rand(len(lengths)).tolist(), list(range(len(lengths))), lengths)
    batch.advantages = torch.randn(len(lengths))
    before = (batch.loss_mask.clone(), batch.advantages.clone(), batch.rewards.clone())
    batch.loss_mask = batch.loss_mask * OverlongFilter().loss_mask(
        step_ctx(None, CaptureModule(), StepMetrics()), batch
    )
    assert (
        torch.equal(batch.loss_mask, before[0])
        and torch.equal(batch.advantages, before[1])
        and torch.equal(batch.rewards, before[2])
    )


# -- advantage normalization options -------------------------------------------------------------------
def test_truncated_responses_can_be_left_out_of_the_statistics():
    # g0 = [1, 0, 0*] with 0* truncated; g1 = [1, 1, 0].
    batch = make_batch(
        [1.0, 0.0, 0.0, 1.0, 1.0, 0.0], [0, 0, 0, 1, 1, 1], [3] * 6, truncated=[False, False, True, False, False, False]
    )
    module = CaptureModule()
    counted = AdvantageNormalization("group", "none", count_truncated=True).compute_advantages(
        step_ctx(module.trainer, module), batch
    )
    excluded = AdvantageNormalization("group", "none", count_truncated=False).compute_advantages(
        step_ctx(module.trainer, module), batch
    )
    torch.testing.assert_close(counted, torch.tensor([2 / 3, -1 / 3, -1 / 3, 1 / 3, 1 / 3, -2 / 3]))
    # Without the truncated one, g0's mean is 1/2; the truncated response is still centred by it.
    torch.testing.assert_close(excluded, torch.tensor([0.5, -0.5, -0.5, 1 / 3, 1 / 3, -2 / 3]))
    # Mixed normalization: batch std over the 5 counted rewards [1, 0, 1, 1, 0]: mean 0.6, var 0.3.
    mixed = AdvantageNormalization("group", "batch", eps=0.0, count_truncated=False).compute_advantages(
        step_ctx(module.trainer, module), batch
    )
    torch.testing.assert_close(mixed, torch.tensor([0.5, -0.5, -0.5, 1 / 3, 1 / 3, -2 / 3]) / math.sqrt(0.3))


def test_token_weighted_statistics_by_hand():
    # One group, rewards [1, 0] with lengths [1, 3]: tokens see [1, 0, 0, 0] -> mean 1/4,
    # Bessel std sqrt((9/16 + 3/16) / 3) = 1/2.
    batch = make_batch([1.0, 0.0], [0, 0], [1, 3])
    module = CaptureModule()
    got = AdvantageNormalization("group", "group", eps=0.0, weighting="token").compute_advantages(
        step_ctx(module.trainer, module), batch
    )
    torch.testing.assert_close(got, torch.tensor([(1 - 0.25) / 0.5, (0 - 0.25) / 0.5]))
    got = AdvantageNormalization("batch", "batch", eps=0.0, weighting="token").compute_advantages(
        step_ctx(module.trainer, module), batch
    )
    torch.testing.assert_close(got, torch.tensor([1.5, -0.5]))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.sampled_from([0.0, 1.0, 0.5]), st.integers(1, 4)), min_size=2, max_size=10
    ),
    st.sampled_from(["group", "batch", "none"]),
    st.sampled_from(["group", "batch", "none"]),
)
def test_token_weighting_equals_sample_weighting_of_repeated_rewards(rows, mean_scope, std_scope):
    groups = torch.tensor([g for g, _, _ in rows])
    rewards = torch.tensor([r for _, r, _ in rows])
    lengths = torch.tensor([n for _, _, n in rows])
    got = normalized_advantages(rewards, groups, mean_scope, std_scope, weights=lengths.double())
    expanded = normalized_advantages(
        rewards.repeat_interleave(lengths), groups.repeat_interleave(lengths), mean_scope, std_scope
    )
    first_token = torch.cumsum(lengths, 0) - lengths
    torch.testing.assert_close(got, expanded[first_token], rtol=1e-5, atol=1e-5)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from([0.0, 0.5, 1.0]), st.booleans()), min_size=2, max_size=10))
def test_zero_weight_equals_leaving_the_response_out_of_the_statistics(rows):
    """A weight-0 response gets the advantage computed from the other responses' statistics alone:
    the same as its reward normalized with the statistics of the batch without it."""
    groups = torch.tensor([g for g, _, _ in rows])
    rewards = torch.tensor([r for _, r, _ in rows], dtype=torch.float64)
    counted = torch.tensor([c for _, _, c in rows])
    assume(counted.any())
    for mean_scope, std_scope in [("group", "batch"), ("group", "group"), ("batch", "batch"), ("group", "none")]:
        # bound_excluded=False: the raw statistics (the bound on top is tested in test_settings.py)
        got = normalized_advantages(
            rewards, groups, mean_scope, std_scope, eps=1e-6, weights=counted.double(), bound_excluded=False
        )
        kept_r, kept_g = rewards[counted], groups[counted]
        b_mean, b_std = kept_r.mean(), kept_r.std() if kept_r.numel() > 1 else torch.zeros((), dtype=torch.float64)
        for i in range(len(rows)):
            same = kept_g == groups[i]
            if "group" in (mean_scope, std_scope) and not same.any():
                assert got[i] == 0  # no counted response in its group: nothing to compare with
                continue
            g_r = kept_r[same]
            g_mean = g_r.mean() if g_r.numel() else 0.0
            g_std = g_r.std() if g_r.numel() > 1 else torch.zeros((), dtype=torch.float64)
            centre = {"group": g_mean, "batch": b_mean}[mean_scope]
            scale = {"group": g_std, "batch": b_std, "none": None}[std_scope]
            # a zero std (one counted response, or all equal) is covered too: then (r - centre) / eps
            expected = rewards[i] - centre if scale is None else (rewards[i] - centre) / (scale + 1e-6)
            torch.testing.assert_close(got[i], torch.as_tensor(expected, dtype=torch.float64))


def test_weighted_mean_std_matches_repetition():
    m, s = weighted_mean_std(torch.tensor([0.0, 2.0, 5.0]), torch.tensor([2.0, 1.0, 3.0]))
    ref = torch.tensor([0.0, 0.0, 2.0, 5.0, 5.0, 5.0], dtype=torch.float64)
    torch.testing.assert_close(m, ref.mean())
    torch.testing.assert_close(s, ref.std())


def test_default_normalization_is_unchanged_by_the_new_options():
    batch = make_batch([1.0, 0.0, 0.0, 1.0, 1.0, 0.0], [0, 0, 0, 1, 1, 1], [1, 2, 3, 4, 5, 6])
    module = CaptureModule()
    got = AdvantageNormalization().compute_advantages(step_ctx(module.trainer, module), batch)
    assert torch.equal(got, normalized_advantages(batch.rewards, batch.group_ids, "group", "batch"))


# -- dynamic sampling ----------------------------------------------------------------------------------
def test_dynamic_sampling_by_hand():
    # g0 all correct, g1 mixed, g2 all wrong, g3 mixed (unordered ids).
    statuses = ["correct", "correct", "correct", "wrong", "wrong", "no_box", "wrong", "correct"]
    batch = make_batch([1, 1, 1, 0, 0, 0, 0, 1], [0, 0, 1, 1, 2, 2, 3, 3], [2] * 8, statuses=statuses)
    keep = DynamicSampling().keep_groups(step_ctx(None, CaptureModule()), batch)
    assert keep.tolist() == [False, False, True, True, False, False, True, True]


def test_dynamic_sampling_judges_correctness_not_shaped_rewards():
    # Both responses wrong; the overlong penalty made their rewards differ.
    batch = make_batch([0.0, -0.5], [0, 0], [2, 4], statuses=["wrong", "wrong"])
    assert DynamicSampling(metric="correct").keep_groups(step_ctx(None, None), batch).tolist() == [False, False]
    assert DynamicSampling(metric="reward").keep_groups(step_ctx(None, None), batch).tolist() == [True, True]
    # Without statuses, correctness falls back to reward > 0.5.
    bare = make_batch([1.0, 0.2, 1.0, 0.9], [0, 0, 1, 1], [1] * 4)
    assert DynamicSampling().keep_groups(step_ctx(None, None), bare).tolist() == [True, True, False, False]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 6), st.booleans()), min_size=1, max_size=40),
    st.sampled_from(["correct", "reward"]),
)
def test_dynamic_sampling_never_emits_an_all_same_group(rows, metric):
    groups = torch.tensor([g for g, _ in rows])
    correct = [c for _, c in rows]
    batch = make_batch(
        [float(c) for c in correct], groups, [1] * len(rows), statuses=["correct" if c else "wrong" for c in correct]
    )
    keep = DynamicSampling(metric=metric).keep_groups(step_ctx(None, None), batch)
    kept = batch.select(torch.nonzero(keep).squeeze(-1))
    for g in kept.group_ids.unique():
        rewards = kept.rewards[kept.group_ids == g]
        assert rewards.min() != rewards.max(), "an all-same group was kept"
    for g in groups.unique():
        in_group = groups == g
        # whole groups only, and every mixed group is kept
        assert keep[in_group].all() or not keep[in_group].any()
        r = batch.rewards[in_group]
        assert bool(keep[in_group].all()) == bool(r.min() != r.max())


def test_mixed_group_mask_on_empty_batch():
    assert mixed_group_mask(torch.zeros(0), torch.zeros(0, dtype=torch.long)).numel() == 0


# -- KL ------------------------------------------------------------------------------------------------
def test_kl_estimators_by_hand_and_gradient():
    logp = torch.tensor([[0.0, -1.0, -2.0]], requires_grad=True)
    ref = torch.tensor([[0.0, -2.0, -1.0]])
    d = ref - logp.detach()  # [0, -1, 1]
    torch.testing.assert_close(kl_estimate(logp, ref, "k1"), -d)
    torch.testing.assert_close(kl_estimate(logp, ref, "k2"), 0.5 * d**2)
    k3 = kl_estimate(logp, ref, "k3")
    torch.testing.assert_close(k3, torch.exp(d) - d - 1)
    assert k3[0, 0] == 0 and bool((k3 >= 0).all())
    (grad,) = torch.autograd.grad(k3.sum(), logp)
    torch.testing.assert_close(grad, 1 - torch.exp(d))  # d/dlogp [exp(ref - logp) - (ref - logp) - 1]
    with pytest.raises(ValueError, match="estimator"):
        kl_estimate(logp, ref, "k4")


def test_kl_with_zero_coefficient_loads_nothing_and_adds_nothing():
    kl = KLPenalty(coef=0.0)
    module = SimpleNamespace(model_path="/does/not/exist", device=torch.device("cpu"))
    kl.on_fit_start(None, module)
    assert kl.reference is None
    ctx = MiniBatchContext(batch=make_batch([1.0], [0], [2]), logprobs=torch.zeros(1, 2))
    assert kl.extra_loss_terms(step_ctx(None, module), ctx) == {}


def test_kl_reference_is_the_initial_policy(tiny_model_path):
    from lite_ppo.training.module import LitePPO

    module = LitePPO(model_path=tiny_model_path)
    module.configure_model()
    gen = torch.Generator().manual_seed(0)
    n, p, r = 3, 4, 5
    input_ids = torch.randint(3, 50, (n, p + r), generator=gen)
    input_ids[1, :p] = input_ids[0, :p]  # rows 0 and 1 answer one prompt (group 0)
    batch = RolloutBatch(
        input_ids=input_ids,
        attention_mask=torch.ones(n, p + r, dtype=torch.long),
        response_mask=torch.ones(n, r),
        group_ids=torch.tensor([0, 0, 1]),
        rewards=torch.tensor([1.0, 0.0, 1.0]),
        truncated=torch.zeros(n, dtype=torch.bool),
        response_lengths=torch.full((n,), r),
        temperature=0.7,
    )
    kl = KLPenalty(coef=0.5, estimator="k3")
    kl.on_fit_start(None, module)
    assert kl.reference is not None and not any(p.requires_grad for p in kl.reference.parameters())
    # At the start the reference equals the policy: same log-probs (temperature included), KL 0.
    policy_logp = module.sequence_logprobs(batch)
    torch.testing.assert_close(kl.reference_logprobs(module, batch), policy_logp, atol=1e-5, rtol=1e-5)
    # Perturb the policy: the term is coef * k3 of the two log-probs, with a gradient to the policy.
    with torch.no_grad():
        for param in module.policy.parameters():
            param.add_(0.05 * torch.randn(param.shape, generator=gen))
    logits = module.forward_logits(batch)
    from lite_ppo.ops import logprobs_from_logits

    logp = logprobs_from_logits(logits, batch.response_ids)
    metrics = StepMetrics()
    terms = kl.extra_loss_terms(
        step_ctx(None, module, metrics), MiniBatchContext(batch=batch, logprobs=logp, metrics=metrics)
    )
    expected = 0.5 * (torch.exp(policy_logp - logp) - (policy_logp - logp) - 1)
    torch.testing.assert_close(terms["kl"], expected, atol=1e-5, rtol=1e-4)
    assert terms["kl"].requires_grad and float(terms["kl"].detach().sum()) > 0
    assert float(metrics.compute(Ranks(None))["kl/ref_kl"]) == pytest.approx(float(expected.mean() / 0.5), rel=1e-4)
    kl.on_fit_end(None, module)
    assert kl.reference is None


@pytest.mark.parametrize(
    ("technique", "option"),
    [
        (EntropyBonus, "coef"),
        (KLCov, "coef"),
        (SAPO, "tau_pos"),
        (SAPO, "tau_neg"),
        (ReinforcePlusPlus, "kl_coef"),
        (KLPenalty, "coef"),
        (OverlongRewardShaping, "factor"),
    ],
)
@pytest.mark.parametrize("value", [math.inf, math.nan])
def test_an_infinite_or_nan_coefficient_is_refused_in_one_line(technique, option, value):
    """An infinite coefficient made every optimizer step non-finite (skipped by the divergence guard): the
    run ended 0 having trained nothing. It is refused when the technique is built, naming the option."""
    with pytest.raises((UserError, ValueError), match=option) as error:
        technique(**{option: value})
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(("option", "value"), [("eps_high", math.nan), ("dual_clip", math.nan)])
def test_a_nan_clip_bound_is_refused_in_one_line(option, value):
    """A NaN bound passed the `< 0` / `<= 1` checks (every comparison with NaN is false) and clipped nothing;
    an infinite upper bound stays allowed: no upper clip, a well-defined objective."""
    with pytest.raises(ValueError, match=option) as error:
        ClipHigher(**{option: value})
    assert "\n" not in str(error.value)
    ClipHigher(eps_high=math.inf)
