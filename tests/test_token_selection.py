"""High-entropy tokens (Wang et al. 2025) and Clip-Cov / KL-Cov (Cui et al. 2025): the pure functions
against values worked out by hand, the callbacks on hand-made batches, and real fits through the
module's hooks (the selection, the logged scalars, and the losses against the ops functions on the
same tensors). The 2-rank = 1-rank equality of the global selections is in tests/test_distributed.py."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from typing_extensions import override

from helpers.technique_batches import step_ctx
from helpers.update_steps import ADVANTAGES, batch, step
from lite_ppo import metric_names as names
from lite_ppo.callbacks import ClipCov, HighEntropyTokens, KLCov
from lite_ppo.callbacks.clip_cov import step_seed
from lite_ppo.errors import UserError
from lite_ppo.ops import aggregate_loss, clipped_surrogate
from lite_ppo.ops.covariance import clip_cov_mask, kl_cov_mask, kl_cov_penalty, token_covariance
from lite_ppo.ops.token_selection import high_entropy_mask, share_count, top_k_mask
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.step_metrics import StepMetrics
from lite_ppo.strategies.ranks import Ranks
from lite_ppo.technique import MiniBatchContext, PolicyLossConfig, Technique, build_loss_config


def hand_batch(lengths, advantages, old_logprobs=None, old_entropy=None, loss_rows=None) -> RolloutBatch:
    """Right-padded responses of ``lengths`` (width = the longest); ``loss_rows``: rows kept in the loss."""
    lengths = torch.tensor(lengths)
    n, width = len(lengths), int(lengths.max())
    response_mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).float()
    loss_mask = response_mask.clone()
    if loss_rows is not None:
        loss_mask *= torch.tensor([float(i in loss_rows) for i in range(n)]).unsqueeze(1)
    ids = torch.cat([torch.full((n, 1), 3), (5 + torch.arange(width)).repeat(n, 1)], dim=1)
    return RolloutBatch(
        input_ids=ids,
        attention_mask=torch.cat([torch.ones(n, 1), response_mask], dim=1).long(),
        response_mask=response_mask,
        group_ids=torch.zeros(n, dtype=torch.long),
        rewards=torch.zeros(n),
        truncated=torch.zeros(n, dtype=torch.bool),
        response_lengths=lengths,
        loss_mask=loss_mask,
        advantages=torch.tensor(advantages, dtype=torch.float32),
        old_logprobs=None if old_logprobs is None else torch.tensor(old_logprobs) * response_mask,
        old_entropy=None if old_entropy is None else torch.tensor(old_entropy) * response_mask,
    )


def computed(metrics: StepMetrics) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.compute(Ranks(None)).items()}


TRAINER = SimpleNamespace(world_size=1, global_rank=0, global_step=0, callbacks=[])


# -- the pure functions ----------------------------------------------------------------------------------
def test_share_count_rounds_the_product_before_ceil_or_floor():
    assert share_count(0.2, 10) == 2  # 0.2 * 10 is 2.0000000000000004 in binary: still 2, not 3
    assert share_count(0.2, 11) == 3 and share_count(0.2, 11, "floor") == 2
    assert share_count(0.29, 100, "floor") == 29  # int(0.29 * 100) would say 28
    assert share_count(2e-4, 100, "floor") == 1 and share_count(2e-4, 100) == 1  # at least one token
    assert share_count(1.0, 7) == 7 and share_count(0.5, 0) == 0


def test_ranks_cat_varying_on_one_process_is_the_identity():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    everything, offset = Ranks(None).cat_varying(x)
    assert torch.equal(everything, x) and offset == 0  # several ranks: tests/test_distributed.py


def test_top_k_mask_breaks_ties_toward_the_earlier_position():
    values = torch.tensor([1.0, 3.0, 3.0, 2.0, 3.0])
    assert top_k_mask(values, 0).tolist() == [False] * 5
    assert top_k_mask(values, 1).tolist() == [False, True, False, False, False]
    assert top_k_mask(values, 2).tolist() == [False, True, True, False, False]
    assert top_k_mask(values, 3).tolist() == [False, True, True, False, True]
    assert top_k_mask(values, 4).tolist() == [False, True, True, True, True]


def test_high_entropy_mask_by_hand():
    entropy = torch.tensor([0.1, 0.9, 0.5, 0.7, 0.3, 0.9, 0.2, 0.4, 0.6, 0.8])
    cases = {0.2: ({1, 5}, 0.9), 0.25: ({1, 5, 9}, 0.8), 0.3: ({1, 5, 9}, 0.8), 1.0: (set(range(10)), 0.1)}
    for share, (expected, tau) in cases.items():  # ceil(0.25 * 10) = 3
        selected, threshold = high_entropy_mask(entropy, share)
        assert set(torch.nonzero(selected).flatten().tolist()) == expected, share
        assert float(threshold) == pytest.approx(tau)
    selected, threshold = high_entropy_mask(torch.tensor([0.4]), 0.2)  # one token: it is the top 20%
    assert selected.tolist() == [True] and float(threshold) == pytest.approx(0.4)
    selected, threshold = high_entropy_mask(torch.zeros(0), 0.2)
    assert selected.numel() == 0 and threshold == -math.inf


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 10, allow_nan=False), min_size=1, max_size=40, unique=True), st.floats(0.01, 1.0))
def test_high_entropy_mask_keeps_exactly_the_top_share(values, share):
    entropy = torch.tensor(values, dtype=torch.float64)
    selected, tau = high_entropy_mask(entropy, share)
    k = math.ceil(round(share * len(values), 9))
    assert int(selected.sum()) == max(1, k)
    assert float(entropy[selected].min()) == float(tau) == sorted(values, reverse=True)[max(1, k) - 1]
    if not selected.all():
        assert float(entropy[~selected].max()) < float(tau)


def test_token_covariance_by_hand_and_against_numpy():
    logp = torch.tensor([-1.0, -2.0, -3.0, -2.0])  # mean -2: deviations 1, 0, -1, 0
    adv = torch.tensor([2.0, 1.0, -1.0, -2.0])  # mean 0
    cov = token_covariance(logp, adv)
    assert cov.dtype == torch.float64 and cov.tolist() == [2.0, 0.0, 1.0, 0.0]
    gen = torch.Generator().manual_seed(0)
    logp, adv = torch.randn(50, generator=gen), torch.randn(50, generator=gen)
    # the mean Cov_t is the (population) covariance of the two
    assert float(token_covariance(logp, adv).mean()) == pytest.approx(np.cov(logp, adv, bias=True)[0, 1], rel=1e-12)


def test_clip_cov_mask_draws_among_the_candidates_only():
    cov = torch.tensor([0.5, 1.5, 2.0, 6.0, 1.0, 5.0, 3.0], dtype=torch.float64)
    # strict bounds (as the reference code): 1.0 and 5.0 are not candidates; floor(0.3 * 7) = 2 draws
    counts = torch.zeros(7)
    for seed in range(300):
        detached, candidates = clip_cov_mask(cov, 0.3, 1.0, 5.0, torch.Generator().manual_seed(seed))
        assert candidates.tolist() == [False, True, True, False, False, False, True]
        assert int(detached.sum()) == 2 and not (detached & ~candidates).any()
        again, _ = clip_cov_mask(cov, 0.3, 1.0, 5.0, torch.Generator().manual_seed(seed))
        assert torch.equal(detached, again)  # the same generator state, the same draw
        counts += detached
    # uniform among the 3 candidates: each drawn 2/3 of the time (200 of 300; fixed seeds, no flakiness)
    assert all(160 < counts[i] < 240 for i in (1, 2, 6))
    everything, _ = clip_cov_mask(cov, 1.0, 1.0, 5.0, torch.Generator().manual_seed(0))  # 7 draws, 3 candidates
    assert torch.nonzero(everything).flatten().tolist() == [1, 2, 6]
    nothing, _ = clip_cov_mask(cov, 0.3, 10.0, 20.0, torch.Generator().manual_seed(0))
    assert not nothing.any()


def test_kl_cov_mask_takes_the_largest_covariances():
    cov = torch.tensor([0.3, -1.0, 2.0, 0.3, 5.0, 2.0], dtype=torch.float64)
    assert torch.nonzero(kl_cov_mask(cov, 0.5)).flatten().tolist() == [2, 4, 5]  # floor(3.0) = 3
    assert torch.nonzero(kl_cov_mask(cov, 0.4)).flatten().tolist() == [2, 4]  # floor(2.4) = 2, tie to the earlier 2.0
    assert torch.nonzero(kl_cov_mask(cov, 2e-3)).flatten().tolist() == [4]  # at least one


def test_kl_cov_penalty_value_and_gradient():
    logp = torch.tensor([[-1.0, -2.5, -0.2]], requires_grad=True)
    old = torch.tensor([[-1.5, -2.0, -0.2]])
    penalty = kl_cov_penalty(logp, old, coef=0.7)
    torch.testing.assert_close(penalty, torch.tensor([[0.35, 0.35, 0.0]]))
    (grad,) = torch.autograd.grad(penalty.sum(), logp)
    torch.testing.assert_close(grad, torch.tensor([[0.7, -0.7, 0.0]]))  # coef * sign(logp - old)
    x = torch.tensor([[0.3, -1.2, 2.0]], dtype=torch.float64, requires_grad=True)  # away from the kink
    assert torch.autograd.gradcheck(lambda t: kl_cov_penalty(t, torch.zeros_like(t), 0.7), (x,))


def test_policy_loss_over_selected_tokens_and_its_gradient_by_hand():
    # Lengths 3, 1, 2 with advantages of both signs; at logp = old every ratio is 1 (no clip acts).
    b = hand_batch([3, 1, 2], [1.0, -2.0, 0.5])
    selected = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    logp = torch.tensor([[-1.0, -0.5, -2.0], [-0.3, 0.0, 0.0], [-1.1, -0.7, 0.0]], requires_grad=True)
    token_loss, _ = clipped_surrogate(logp, logp.detach(), b.advantages)
    mask = b.loss_mask * selected
    # token-mean over the 3 selected tokens: -(1 + 1 + 0.5) / 3; each selected token's gradient -A / 3
    loss = aggregate_loss(token_loss, mask, "token-mean")
    assert float(loss.detach()) == pytest.approx(-2.5 / 3)
    (grad,) = torch.autograd.grad(loss, logp, retain_graph=True)
    torch.testing.assert_close(grad, torch.tensor([[-1 / 3, 0.0, -1 / 3], [0.0, 0.0, 0.0], [0.0, -0.5 / 3, 0.0]]))
    # seq-mean-token-mean: rows with a selected token (0 and 2) count, each the mean of its selected tokens
    loss = aggregate_loss(token_loss, mask, "seq-mean-token-mean")
    assert float(loss.detach()) == pytest.approx((-1.0 + -0.5) / 2)
    (grad,) = torch.autograd.grad(loss, logp)
    torch.testing.assert_close(grad, torch.tensor([[-0.25, 0.0, -0.25], [0.0, 0.0, 0.0], [0.0, -0.25, 0.0]]))


# -- the callbacks on hand-made batches ------------------------------------------------------------------
def test_high_entropy_tokens_selects_among_loss_tokens_only():
    # Row 1 is out of the loss (e.g. overlong filtering) and holds the largest entropies: never selected.
    entropy = [[0.5, 0.1, 0.9, 0.0], [3.0, 3.0, 0.0, 0.0], [0.7, 0.2, 0.3, 0.8]]
    b = hand_batch([3, 2, 4], [1.0, -1.0, 0.5], old_entropy=entropy, loss_rows={0, 2})
    metrics = StepMetrics()
    technique = HighEntropyTokens(share=0.4)  # 7 loss tokens: ceil(2.8) = 3 -> 0.9, 0.8, 0.7
    mask = technique.policy_mask(step_ctx(TRAINER, None, metrics), b)
    assert technique.token_weights(step_ctx(TRAINER, None, metrics), b) is None  # denominator "selected": a mask
    assert mask.tolist() == [[0, 0, 1, 0], [0, 0, 0, 0], [1, 0, 0, 1]]
    logged = computed(metrics)
    assert logged["high_entropy/selected_share"] == pytest.approx(3 / 7)
    assert logged["high_entropy/threshold"] == pytest.approx(0.7)
    all_tokens = HighEntropyTokens(share=0.4, denominator="all")  # TRL's: weights 0, the same selection
    assert all_tokens.policy_mask(step_ctx(TRAINER, None, StepMetrics()), b) is None
    assert all_tokens.token_weights(step_ctx(TRAINER, None, StepMetrics()), b).tolist() == mask.tolist()
    assert technique.needs_old_entropy and not technique.needs_token_level_objective
    assert all_tokens.needs_token_level_objective  # its weights act on single tokens


def test_clip_cov_weights_are_the_seeded_draw_among_in_bound_tokens():
    # old log-probs and advantages chosen so that Cov_t spreads over [-1, 4]; bounds (0.5, 3)
    old = [[-0.5, -1.0, -3.0], [-2.0, -4.0, 0.0], [-1.0, -0.2, -2.5]]
    b = hand_batch([3, 2, 3], [1.5, -1.0, 0.5], old_logprobs=old)
    tokens = b.loss_mask > 0
    adv = b.advantages.unsqueeze(-1).expand_as(tokens)[tokens].double()
    logp = b.old_logprobs[tokens].double()
    cov = (logp - logp.mean()) * (adv - adv.mean())
    technique = ClipCov(share=0.25, lower=0.5, upper=3.0, seed=11)
    metrics = StepMetrics()
    weights = technique.token_weights(
        step_ctx(SimpleNamespace(**{**vars(TRAINER), "global_step": 4}), None, metrics), b
    )
    detached, candidates = clip_cov_mask(cov, 0.25, 0.5, 3.0, torch.Generator().manual_seed(step_seed(11, 4)))
    expected = torch.ones_like(weights)
    expected[tokens] = 1.0 - detached.float()
    assert torch.equal(weights, expected) and int(detached.sum()) == 2  # floor(0.25 * 8) = 2
    assert bool(((cov > 0.5) & (cov < 3.0)).eq(candidates).all())
    logged = computed(metrics)
    assert logged["clip_cov/detached_share"] == pytest.approx(2 / 8)
    assert logged["clip_cov/candidate_share"] == pytest.approx(float(candidates.sum()) / 8)
    assert logged["clip_cov/covariance"] == pytest.approx(float(cov.mean()))
    # another optimizer step draws again (the seed moves with it); the run's seed when seed is null
    assert step_seed(11, 4) != step_seed(11, 5)


def test_kl_cov_penalizes_its_selection_in_every_micro_batch():
    old = [[-0.5, -1.0, -3.0], [-2.0, -4.0, 0.0], [-1.0, -0.2, -2.5]]
    b = hand_batch([3, 2, 3], [1.5, -1.0, 0.5], old_logprobs=old)
    technique = KLCov(share=0.25, coef=0.5)  # floor(0.25 * 8) = 2 tokens
    metrics = StepMetrics()
    technique.before_update(step_ctx(TRAINER, None, metrics), b)  # read-only: the selection only
    tokens = b.loss_mask > 0
    adv = b.advantages.unsqueeze(-1).expand_as(tokens)[tokens].double()
    logp = b.old_logprobs[tokens].double()
    cov = (logp - logp.mean()) * (adv - adv.mean())
    expected = torch.zeros_like(tokens)
    expected[tokens] = kl_cov_mask(cov, 0.25)
    assert torch.equal(technique.penalized, expected) and int(expected.sum()) == 2
    logged = computed(metrics)
    assert logged["kl_cov/selected_share"] == pytest.approx(2 / 8)
    assert logged["kl_cov/threshold"] == pytest.approx(float(cov[kl_cov_mask(cov, 0.25)].min()))
    # A micro-batch of rows [2, 0] (after an update: log-probs moved by 0.3 everywhere)
    rows = torch.tensor([2, 0])
    micro = b.select(rows)
    moved = (micro.old_logprobs + 0.3) * micro.response_mask
    terms = technique.extra_loss_terms(step_ctx(None, None), MiniBatchContext(batch=micro, logprobs=moved, rows=rows))
    torch.testing.assert_close(terms["kl_cov"], 0.5 * 0.3 * expected[rows].float() * micro.response_mask)


def test_argument_errors_are_one_line_user_errors():
    for make, field in [
        (lambda: HighEntropyTokens(share=0.0), "HighEntropyTokens.share"),
        (lambda: HighEntropyTokens(denominator="some"), "HighEntropyTokens.denominator"),
        (lambda: ClipCov(share=1.5), "ClipCov.share"),
        (lambda: ClipCov(lower=5.0, upper=1.0), "ClipCov.lower"),
        (lambda: KLCov(share=0.0), "KLCov.share"),
        (lambda: KLCov(coef=-1.0), "KLCov.coef"),
    ]:
        with pytest.raises(UserError, match=field) as info:
            make()
        assert "\n" not in str(info.value)


# -- combinations that cannot work -----------------------------------------------------------------------
class SequenceRatio(Technique):
    """Chooses GSPO's sequence-level objective (or another by name)."""

    def __init__(self, objective: str = "gspo") -> None:
        self.objective = objective

    @override
    def configure_loss(self, config):
        return {"objective": self.objective}


def test_token_weights_are_refused_with_a_sequence_level_objective():
    # A weight of 0 under GSPO's sequence ratio only rescales the response: refused, naming both.
    for technique in (HighEntropyTokens(denominator="all"), ClipCov()):
        with pytest.raises(UserError, match=rf"{type(technique).__name__} weights .* 'gspo' .*SequenceRatio") as info:
            build_loss_config(PolicyLossConfig(), [SequenceRatio(), technique])
        assert "\n" not in str(info.value)
        build_loss_config(PolicyLossConfig(), [SequenceRatio("gspo_token"), technique])  # token-level: fine
    # A policy mask reaches the objective (the ratio over the selected tokens), a penalty adds: both work.
    build_loss_config(PolicyLossConfig(), [SequenceRatio(), HighEntropyTokens(), KLCov()])


def test_clip_cov_and_kl_cov_refuse_each_other_in_either_order():
    from lite_ppo.technique import refuse_conflicting_techniques

    for techniques in ([ClipCov(), KLCov()], [KLCov(), ClipCov()]):
        with pytest.raises(UserError, match="conflicting techniques: KLCov and ClipCov are alternative") as info:
            refuse_conflicting_techniques(techniques)
        assert "\n" not in str(info.value)
    refuse_conflicting_techniques([HighEntropyTokens(), KLCov()])  # no conflict declared: nothing raised


# -- through a real fit ----------------------------------------------------------------------------------
class Capture(Technique):
    """Records, per micro-batch, the rows, the current log-probs and the optimizer step, the KL-Cov
    selection in force, and the final batch and scalars."""

    def __init__(self, kl_cov: KLCov | None = None) -> None:
        self.kl_cov = kl_cov
        self.micro: list[tuple[int, torch.Tensor, torch.Tensor]] = []

    @override
    def extra_loss_terms(self, ctx, minibatch):
        self.micro.append((ctx.module.policy_version, minibatch.rows.clone(), minibatch.logprobs.detach().clone()))
        if self.kl_cov is not None:
            self.penalized = self.kl_cov.penalized.clone()
        return {}

    @override
    def on_update_end(self, ctx, batch, stats):
        self.batch = batch
        self.scalars = {k: float(v) for k, v in stats.scalars.items()}


def per_step_losses(capture: Capture, token_loss_of, mask_of) -> list[float]:
    """Each optimizer step's loss: sum over its micro-batches of token_loss * mask / the step's mask sum."""
    steps: dict[int, list[float]] = {}
    for k, rows, logprobs in capture.micro:
        total, count = steps.setdefault(k, [0.0, 0.0])
        mask = mask_of(rows)
        steps[k] = [total + float((token_loss_of(rows, logprobs) * mask).sum()), count + float(mask.sum())]
    return [total / count for total, count in steps.values()]


def own_tags(scalars: dict[str, float], *prefixes: str) -> set[str]:
    return {tag for tag in scalars if tag.startswith(prefixes)}


def documented(*techniques: str) -> set[str]:
    return {tag for technique in techniques for tag in names.TECHNIQUE_SCALARS[technique]}


def flat_top(values: torch.Tensor, mask: torch.Tensor, k: int) -> torch.Tensor:
    """A second implementation of the selection: python's sort of (-value, position) over the masked tokens."""
    flat = values[mask].tolist()
    keep = {i for _, i in sorted((-v, i) for i, v in enumerate(flat))[:k]}
    out = torch.zeros_like(mask)
    out[mask] = torch.tensor([i in keep for i in range(len(flat))])
    return out


@pytest.mark.numerics
def test_high_entropy_tokens_and_kl_cov_through_a_fit(tiny_model_path):
    """Two optimizer steps (2 mini-batches): the selections hold for both, the policy loss is each
    step's mean over its selected tokens, and the KL-Cov term is 0 in the first step and positive after.
    Tolerances: the losses are sums of ~20 float32 terms of order 1 (1e-5 relative covers rounding)."""
    kl_cov = KLCov(share=0.1, coef=0.5)
    capture = Capture(kl_cov)
    step(tiny_model_path, batch(), extra=[HighEntropyTokens(share=0.3), kl_cov, capture], num_mini_batches=2)
    b, scalars = capture.batch, capture.scalars
    assert own_tags(scalars, "high_entropy/", "kl_cov/", "loss/kl_cov") == documented("HighEntropyTokens", "KLCov")
    tokens = b.loss_mask > 0
    n = int(tokens.sum())  # 24
    # high-entropy tokens: the top ceil(0.3 n) of pi_old's entropy, by a second implementation
    k = math.ceil(0.3 * n)
    assert b.old_entropy is not None and torch.equal(b.policy_mask.bool(), flat_top(b.old_entropy, tokens, k))
    assert scalars["high_entropy/selected_share"] == pytest.approx(k / n)
    assert scalars["high_entropy/threshold"] == pytest.approx(float(b.old_entropy[b.policy_mask.bool()].min()))
    # KL-Cov: the top floor(0.1 n) covariances of log pi_old and A (numpy's float64 arithmetic)
    logp = b.old_logprobs.double().numpy()
    adv = b.advantages.double().numpy()[:, None].repeat(logp.shape[1], 1)
    m = tokens.numpy()
    cov = np.zeros_like(logp)
    cov[m] = (logp[m] - logp[m].mean()) * (adv[m] - adv[m].mean())
    assert torch.equal(capture.penalized, flat_top(torch.from_numpy(cov), tokens, math.floor(0.1 * n)))
    assert scalars["kl_cov/covariance"] == pytest.approx(float(cov[m].mean()), rel=1e-6)
    # the policy loss: per optimizer step, the clipped surrogate (clip 0.2) over the selected tokens
    old, a = b.old_logprobs, ADVANTAGES

    def surrogate(rows, logprobs):
        return clipped_surrogate(logprobs, old[rows], a[rows], 0.2, 0.2)[0]

    policy = per_step_losses(capture, surrogate, lambda rows: b.policy_loss_mask[rows])
    assert len(policy) == 2 and scalars["loss/policy"] == pytest.approx(sum(policy) / 2, rel=1e-5)
    # the KL-Cov term: coef * |logp - old| on the penalized tokens, a token mean over every loss token
    kl = per_step_losses(
        capture,
        lambda rows, logprobs: kl_cov_penalty(logprobs, old[rows], 0.5) * capture.penalized[rows],
        lambda rows: b.loss_mask[rows],
    )
    assert kl[0] == 0 and kl[1] > 0
    assert scalars["loss/kl_cov"] == pytest.approx(sum(kl) / 2, rel=1e-5)


@pytest.mark.numerics
def test_clip_cov_with_weighted_high_entropy_tokens_through_a_fit(tiny_model_path):
    """One optimizer step: Clip-Cov's seeded draw and the high-entropy tokens (denominator ``all``)
    multiply into the token weights; the policy loss keeps every loss token in its denominator."""
    capture = Capture()
    extra = [ClipCov(share=0.2, lower=0.0, upper=10.0, seed=5), HighEntropyTokens(share=0.5, denominator="all")]
    step(tiny_model_path, batch(), extra=[*extra, capture], num_mini_batches=1)
    b, scalars = capture.batch, capture.scalars
    assert own_tags(scalars, "high_entropy/", "clip_cov/") == documented("HighEntropyTokens", "ClipCov")
    tokens = b.loss_mask > 0
    n = int(tokens.sum())
    assert b.policy_mask is None
    cov = token_covariance(b.old_logprobs[tokens], b.advantages.unsqueeze(-1).expand_as(tokens)[tokens])
    detached, candidates = clip_cov_mask(cov, 0.2, 0.0, 10.0, torch.Generator().manual_seed(step_seed(5, 0)))
    assert int(detached.sum()) == min(math.floor(0.2 * n), int(candidates.sum())) > 0
    expected = torch.zeros_like(b.old_logprobs)
    expected[tokens] = (1.0 - detached.float()) * flat_top(b.old_entropy, tokens, math.ceil(0.5 * n))[tokens].float()
    assert torch.equal(b.token_weights * b.loss_mask, expected)
    assert scalars["clip_cov/detached_share"] == pytest.approx(float(detached.sum()) / n)
    assert scalars["high_entropy/selected_share"] == pytest.approx(math.ceil(0.5 * n) / n)
    old, a = b.old_logprobs, ADVANTAGES

    def weighted_surrogate(rows, logprobs):
        return clipped_surrogate(logprobs, old[rows], a[rows], 0.2, 0.2)[0] * b.token_weights[rows]

    (policy,) = per_step_losses(capture, weighted_surrogate, lambda rows: b.loss_mask[rows])
    assert scalars["loss/policy"] == pytest.approx(policy, rel=1e-5)
