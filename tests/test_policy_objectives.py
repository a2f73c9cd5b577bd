"""The policy objectives (GSPO, GSPO-token, CISPO, SAPO, and the default PPO clip through the registry):
hand-computed values and gradients on small tensors, the choice and its conflicts at fit start, and each
technique through one real training step (the hook path): its scalars, and the loss equal to the pure
function on the same batch."""

from __future__ import annotations

import importlib
import math
import warnings

import pytest
import torch
import yaml

from helpers.paths import REPO
from helpers.update_steps import batch, step
from lite_ppo.callbacks import CISPO, GSPO, SAPO, ClipHigher, LossAggregation
from lite_ppo.errors import UserError
from lite_ppo.ops import (
    aggregate_loss,
    aggregation_denominator,
    clip_fractions,
    clipped_surrogate,
    policy_objective,
)
from lite_ppo.ops.cispo import cispo
from lite_ppo.ops.gspo import gspo, gspo_token
from lite_ppo.ops.sapo import sapo
from lite_ppo.technique import PolicyLossConfig, Technique, advantage_estimator, build_loss_config, objective_kwargs

D = torch.float64

# Five responses of lengths 3, 1, 2, 2, 0 (the last has no loss token). Padding holds large
# log-ratios that a mask mistake would show.
MASK = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 0], [0, 0, 0]], dtype=D)
LOG_RATIO = torch.tensor(
    [[0.3, -0.1, 0.1], [-0.02, 5.0, 5.0], [-0.3, -0.1, 5.0], [0.01, 0.01, 5.0], [5.0, 5.0, 5.0]], dtype=D
)
ADVANTAGES = torch.tensor([1.0, -0.5, -1.0, 2.0, 1.0], dtype=D)
OLD = torch.tensor(
    [[-1.0, -2.0, -0.5], [-0.7, -1.0, -1.0], [-3.0, -0.2, -1.0], [-1.5, -0.9, -1.0], [-1.0] * 3], dtype=D
)


def _logprobs() -> torch.Tensor:
    return (OLD + LOG_RATIO).clone().requires_grad_(True)


# -- GSPO -----------------------------------------------------------------------------------------------
def test_gspo_sequence_ratio_clip_and_statistics_by_hand():
    # s_i = exp(mean of the loss tokens' log-ratios): e^0.1, e^-0.02, e^-0.2, e^0.01 (row 4: no tokens).
    # Clip range [0.95, 1.05]: row 0 (A>0, 1.105 > 1.05) clipped at the top, row 2 (A<0, 0.819 < 0.95)
    # at the bottom; rows 1 and 3 inside.
    s = [math.exp(0.1), math.exp(-0.02), math.exp(-0.2), math.exp(0.01)]
    expected = [-1.05 * 1.0, -s[1] * -0.5, max(-s[2] * -1.0, -0.95 * -1.0), -s[3] * 2.0]
    loss, stats = gspo(_logprobs(), OLD, ADVANTAGES, MASK, clip_low=0.05, clip_high=0.05)
    for i in range(4):
        torch.testing.assert_close(loss[i], torch.full((3,), expected[i], dtype=D))  # the same on every token
    # seq-mean-token-mean over the 4 responses with tokens is GSPO's 1/G sum_i l_i.
    torch.testing.assert_close(
        aggregate_loss(loss, MASK, "seq-mean-token-mean"), torch.tensor(sum(expected) / 4, dtype=D)
    )
    shares = {k: float(total / count) for k, (total, count) in stats.items()}
    assert shares["clip_fraction"] == 2 / 4  # rows 0 and 2 of the 4 with tokens
    assert shares["clip_upper_of_positive"] == 1 / 2  # row 0 of rows 0, 3
    assert shares["clip_lower_of_negative"] == 1 / 2  # row 2 of rows 1, 2
    assert shares["seq_ratio_abs_dev"] == pytest.approx(sum(abs(x - 1) for x in s) / 4, rel=1e-12)


def test_gspo_paper_range_clips_what_ppo_would_not():
    # The paper's [1 - 3e-4, 1 + 4e-4]: e^0.01 (row 3, A>0) is already clipped; e^-0.02 (row 1, A<0) is
    # below 1 - 3e-4 and clipped too. Only row 0 (A>0, above) and row 2 (A<0, below) as before, plus these.
    loss, stats = gspo(_logprobs(), OLD, ADVANTAGES, MASK)
    torch.testing.assert_close(loss[3, 0], torch.tensor(-(1 + 4e-4) * 2.0, dtype=D))
    torch.testing.assert_close(loss[1, 0], torch.tensor((1 - 3e-4) * 0.5, dtype=D))
    total, count = stats["clip_fraction"]
    assert (float(total), float(count)) == (4.0, 4.0)


def test_gspo_gradient_by_hand_and_gradcheck():
    logprobs = _logprobs()
    loss, _ = gspo(logprobs, OLD, ADVANTAGES, MASK, clip_low=0.05, clip_high=0.05)
    (grad,) = torch.autograd.grad(aggregate_loss(loss, MASK, "seq-mean-token-mean"), logprobs)
    # Unclipped row i: d/d logp_t of (1/G)(-A_i s_i) = -A_i s_i / (G |y_i|) on its loss tokens; clipped rows 0 and 2: 0.
    expected = torch.zeros(5, 3, dtype=D)
    expected[1, 0] = 0.5 * math.exp(-0.02) / 4
    expected[3, :2] = -2.0 * math.exp(0.01) / (4 * 2)
    torch.testing.assert_close(grad, expected)

    gen = torch.Generator().manual_seed(0)
    old = torch.randn(5, 3, generator=gen, dtype=D)
    start = (old + 0.02 * torch.randn(5, 3, generator=gen, dtype=D)).requires_grad_(True)
    for fn in (gspo, sapo):
        assert torch.autograd.gradcheck(
            lambda lp, fn=fn: aggregate_loss(fn(lp, old, ADVANTAGES, MASK)[0], MASK, "seq-mean-token-mean"), (start,)
        )


def test_gspo_token_equals_gspo_with_one_advantage_per_response():
    a, b = _logprobs(), _logprobs()
    loss_seq, stats_seq = gspo(a, OLD, ADVANTAGES, MASK, clip_low=0.05, clip_high=0.05)
    loss_tok, stats_tok = gspo_token(b, OLD, ADVANTAGES, MASK, clip_low=0.05, clip_high=0.05)
    assert torch.equal(loss_seq, loss_tok) and stats_seq.keys() == stats_tok.keys()
    for key in stats_seq:
        assert torch.equal(stats_seq[key][0], stats_tok[key][0]) and torch.equal(stats_seq[key][1], stats_tok[key][1])
    (grad_seq,) = torch.autograd.grad(aggregate_loss(loss_seq, MASK, "seq-mean-token-mean"), a)
    (grad_tok,) = torch.autograd.grad(aggregate_loss(loss_tok, MASK, "seq-mean-token-mean"), b)
    torch.testing.assert_close(grad_tok, grad_seq, rtol=1e-12, atol=1e-15)


def test_gspo_token_gives_each_token_its_own_advantage():
    # Row 3 (s = e^0.01, unclipped at +-0.05) with token advantages [1, 3]; row 0 (s = e^0.1 > 1.05)
    # with [+1, -1, +1]: the clip removes the A>0 tokens only, the A<0 token keeps its gradient.
    token_advantages = ADVANTAGES.unsqueeze(-1).repeat(1, 3)
    token_advantages[3, :2] = torch.tensor([1.0, 3.0], dtype=D)
    token_advantages[0] = torch.tensor([1.0, -1.0, 1.0], dtype=D)
    logprobs = _logprobs()
    loss, _ = gspo_token(logprobs, OLD, token_advantages, MASK, clip_low=0.05, clip_high=0.05)
    torch.testing.assert_close(loss[3, :2], -math.exp(0.01) * torch.tensor([1.0, 3.0], dtype=D))  # value s_i
    (grad,) = torch.autograd.grad(aggregate_loss(loss, MASK, "seq-mean-token-mean"), logprobs)
    # d l_{i,t} / d logp_t = -A_{i,t} sg[s_i] on unclipped tokens, then / (G |y_i|) with G = 4.
    torch.testing.assert_close(grad[3, :2], -math.exp(0.01) * torch.tensor([1.0, 3.0], dtype=D) / (4 * 2))
    torch.testing.assert_close(grad[0], torch.tensor([0.0, math.exp(0.1) / (4 * 3), 0.0], dtype=D))
    # GSPO with the row's mean advantage (2) would give both tokens of row 3 the same gradient.
    mean_advantages = ADVANTAGES.clone()
    mean_advantages[3] = 2.0
    seq_logprobs = _logprobs()
    seq_loss, _ = gspo(seq_logprobs, OLD, mean_advantages, MASK, clip_low=0.05, clip_high=0.05)
    (seq_grad,) = torch.autograd.grad(aggregate_loss(seq_loss, MASK, "seq-mean-token-mean"), seq_logprobs)
    assert seq_grad[3, 0] == seq_grad[3, 1] and grad[3, 0] != grad[3, 1]
    with pytest.raises(ValueError, match="one advantage per response"):
        gspo(logprobs, OLD, token_advantages, MASK)


# -- CISPO ----------------------------------------------------------------------------------------------
def test_cispo_clips_the_weight_and_keeps_every_gradient():
    # Token ratios e^0.3 = 1.35 and e^-0.5 = 0.61; cap 1.2, then also a floor 0.8.
    old = torch.zeros(2, 2, dtype=D)
    logprobs = torch.tensor([[0.3, -0.5], [0.0, 0.1]], dtype=D, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=D)
    advantages = torch.tensor([1.0, -2.0], dtype=D)
    r = [[math.exp(0.3), math.exp(-0.5)], [1.0, math.exp(0.1)]]
    for floor, weights in ((None, [[1.2, r[0][1]], [1.0, r[1][1]]]), (0.2, [[1.2, 0.8], [1.0, r[1][1]]])):
        loss, stats = cispo(logprobs, old, advantages, mask, eps_low_is=floor, eps_high_is=0.2)
        w = torch.tensor(weights, dtype=D)
        a = advantages.unsqueeze(-1)
        torch.testing.assert_close(loss, -w * a * logprobs.detach())
        (grad,) = torch.autograd.grad(aggregate_loss(loss, mask, "token-mean"), logprobs)
        torch.testing.assert_close(grad, -w * a * mask / 3)  # REINFORCE: -w A / N, the weight a constant
        assert grad[0, 0] != 0  # clipped at the cap, and still a gradient (PPO's clip would give 0)
        clipped = 1 if floor is None else 2
        assert float(stats["clipped_fraction"][0] / stats["clipped_fraction"][1]) == clipped / 3
        assert float(stats["weight_mean"][0] / stats["weight_mean"][1]) == pytest.approx(float((w * mask).sum() / 3))
    ppo_loss, _ = clipped_surrogate(logprobs, old, advantages, 0.2, 0.2)
    (ppo_grad,) = torch.autograd.grad(aggregate_loss(ppo_loss, mask, "token-mean"), logprobs)
    assert ppo_grad[0, 0] == 0


# -- SAPO -----------------------------------------------------------------------------------------------
def test_sapo_gate_by_hand():
    # Row 0: A = +1 (tau_pos 1.0), ratios 1 and e^0.5; row 1: A = -2 (tau_neg 2.0), ratio e^-0.4; row 2: A = 0.
    old = torch.zeros(3, 2, dtype=D)
    logprobs = torch.tensor([[0.0, 0.5], [-0.4, 0.0], [0.3, 0.0]], dtype=D, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 0.0]], dtype=D)
    advantages = torch.tensor([1.0, -2.0, 0.0], dtype=D)
    loss, stats = sapo(logprobs, old, advantages, mask, tau_pos=1.0, tau_neg=2.0)

    def sig(x: float) -> float:
        return 1 / (1 + math.exp(-x))

    r01, r10 = math.exp(0.5), math.exp(-0.4)
    # On-policy the gate is 2 / tau: loss -2A/tau; the A = 0 row contributes nothing.
    expected = [[-2.0, -sig(r01 - 1) * 4], [-sig(2 * (r10 - 1)) * 2 * -2.0, -0.5 * 2 * -2.0], [0.0, 0.0]]
    torch.testing.assert_close(loss, torch.tensor(expected, dtype=D))
    (grad,) = torch.autograd.grad((loss * mask).sum(), logprobs)
    # d/d logp of -A f(r): -A * 4 sig(tau (r-1)) (1 - sig(tau (r-1))) * r; on-policy exactly -A.
    slope = lambda tau, r: 4 * sig(tau * (r - 1)) * (1 - sig(tau * (r - 1)))  # noqa: E731
    expected_grad = [[-1.0, -slope(1.0, r01) * r01], [2.0 * slope(2.0, r10) * r10, 0.0], [0.0, 0.0]]
    torch.testing.assert_close(grad, torch.tensor(expected_grad, dtype=D))
    assert float(stats["grad_scale_of_positive"][0] / stats["grad_scale_of_positive"][1]) == pytest.approx(
        (1.0 + slope(1.0, r01)) / 2, rel=1e-12
    )
    assert float(stats["grad_scale_of_negative"][0] / stats["grad_scale_of_negative"][1]) == pytest.approx(
        slope(2.0, r10), rel=1e-12
    )


# -- the default, through the registry --------------------------------------------------------------------
@pytest.mark.parametrize("dual_clip", [None, 3.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ppo_clip_through_the_registry_is_the_clipped_surrogate(seed, dual_clip):
    gen = torch.Generator().manual_seed(seed)
    logprobs, old = torch.randn(6, 5, generator=gen), torch.randn(6, 5, generator=gen)
    advantages = torch.randn(6, generator=gen)
    mask = (torch.rand(6, 5, generator=gen) > 0.3).float()
    config = build_loss_config(PolicyLossConfig(clip_low=0.2, clip_high=0.28, dual_clip=dual_clip), [])
    objective = policy_objective(config.objective)
    assert objective.name == "ppo_clip" and objective.prefix == "clip"
    loss, stats = objective.fn(logprobs, old, advantages, mask, **objective_kwargs(config))
    reference, ratio = clipped_surrogate(logprobs, old, advantages, 0.2, 0.28, dual_clip)
    assert torch.equal(loss, reference)
    shares = clip_fractions(ratio, advantages, mask, 0.2, 0.28, dual_clip)
    a = advantages.unsqueeze(-1).expand_as(mask)
    assert torch.equal(stats["fraction"][0] / stats["fraction"][1], shares["total"])
    assert float(stats["upper_of_positive"][1]) == float(((a > 0) * mask).sum())
    assert float(stats["lower_of_negative"][1]) == float(((a < 0) * mask).sum())
    assert ("dual_of_negative" in stats) == (dual_clip is not None)


# -- choosing an objective, and what cannot combine -----------------------------------------------------
def test_techniques_choose_the_objective_and_its_arguments():
    config = build_loss_config(PolicyLossConfig(), [GSPO(clip_low=1e-3, clip_high=2e-3, variant="token")])
    assert (config.objective, objective_kwargs(config)) == ("gspo_token", {"clip_low": 1e-3, "clip_high": 2e-3})
    config = build_loss_config(PolicyLossConfig(), [CISPO(eps_high_is=1.0)])
    assert (config.objective, objective_kwargs(config)) == ("cispo", {"eps_low_is": None, "eps_high_is": 1.0})
    config = build_loss_config(PolicyLossConfig(), [SAPO(tau_neg=2.0)])
    assert (config.objective, objective_kwargs(config)) == ("sapo", {"tau_pos": 1.0, "tau_neg": 2.0})
    # Nobody chooses: the PPO clip, which reads the clip range.
    config = build_loss_config(PolicyLossConfig(0.2, 0.2), [ClipHigher(eps_high=0.28)])
    assert objective_kwargs(config) == {"clip_low": 0.2, "clip_high": 0.28, "dual_clip": None}


@pytest.mark.parametrize(
    ("techniques", "message"),
    [
        ([GSPO(), CISPO()], "conflicting techniques: GSPO and CISPO both set the loss's 'objective'; keep one"),
        ([SAPO(), GSPO(variant="token")], "conflicting techniques: SAPO and GSPO both set the loss's 'objective'"),
        (
            [ClipHigher(eps_high=0.28), GSPO()],
            "conflicting techniques: ClipHigher sets the loss's 'clip_high', which the 'gspo' objective "
            "chosen by GSPO does not use; keep one",
        ),
        ([CISPO(), ClipHigher(dual_clip=3.0)], "ClipHigher sets the loss's 'clip_high', which the 'cispo' objective"),
    ],
)
def test_objectives_that_cannot_combine_fail_naming_both(techniques, message):
    with pytest.raises(UserError) as error:
        build_loss_config(PolicyLossConfig(), techniques)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_bad_objective_settings_are_one_line_errors():
    class Misspelt(Technique):
        def configure_loss(self, config):
            return {"objective": "gspo", "objective_args": {"clip_hi": 0.1}}

    with pytest.raises(ValueError, match=r"'gspo' takes clip_low, clip_high; got 'clip_hi'"):
        build_loss_config(PolicyLossConfig(), [Misspelt()])
    with pytest.raises(ValueError, match="unknown policy objective 'ppo'; choose one of ppo_clip, gspo"):
        policy_objective("ppo")
    for make, needle in [
        (lambda: GSPO(clip_low=1.0), "GSPO.clip_low must be in [0, 1), got 1.0"),
        (lambda: GSPO(clip_high=-1e-4), "GSPO.clip_high must be >= 0"),
        (lambda: GSPO(variant="tokens"), "GSPO.variant must be 'sequence' or 'token'"),
        (lambda: CISPO(eps_high_is=-1.0), "CISPO.eps_high_is must be >= 0"),
        (lambda: CISPO(eps_low_is=1.5), "CISPO.eps_low_is must be in [0, 1]"),
        (lambda: SAPO(tau_pos=0.0), "SAPO.tau_pos must be > 0, got 0.0"),
        (lambda: SAPO(tau_neg=float("nan")), "SAPO.tau_neg must be > 0"),
    ]:
        with pytest.raises(ValueError) as error:
            make()
        assert needle in str(error.value) and "\n" not in str(error.value)


def test_an_aggregation_other_than_the_papers_is_warned_about_at_fit_start():
    from lite_ppo.training.module import LitePPO

    module = LitePPO(model_path="builtin:tiny")  # nothing loads before configure_model
    for techniques, warned in [
        ([GSPO(), LossAggregation("token-mean")], True),
        ([GSPO(variant="token"), LossAggregation("seq-mean-token-mean")], False),
        ([CISPO(), LossAggregation("token-mean")], False),
        ([LossAggregation("seq-mean-token-sum")], False),  # ppo_clip: any aggregation
    ]:
        module._techniques = techniques  # what setup finds in the trainer's callbacks
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module.on_fit_start()
        messages = [str(w.message) for w in caught if "policy objective" in str(w.message)]
        expected = [
            "the 'gspo' policy objective is defined with the 'seq-mean-token-mean' loss aggregation, "
            "this run uses 'token-mean' (set it with LossAggregation)"
        ]
        assert messages == (expected if warned else []), techniques


# -- through a real training step -------------------------------------------------------------------------
class RecordMicroBatches(Technique):
    """What the update fed the objective in every micro-batch: the log-probs (with the policy version,
    i.e. the mini-batch), old log-probs, advantages and the policy loss's mask."""

    def on_fit_start(self, trainer, pl_module) -> None:
        self.micro: list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def extra_loss_terms(self, ctx, minibatch):
        b = minibatch.batch
        self.micro.append(
            (
                ctx.module.policy_version,
                minibatch.logprobs.detach().clone(),
                b.old_logprobs,
                b.advantages,
                b.policy_loss_mask,
            )
        )
        return {}


# name -> (the technique, the paper's aggregation, the statistics' prefix). CISPO's cap is lowered from
# 5 so that some weights of this small step reach it.
OBJECTIVES = {
    "gspo": (GSPO, "seq-mean-token-mean", "gspo"),
    "cispo": (lambda: CISPO(eps_high_is=0.5), "token-mean", "cispo"),
    "sapo": (SAPO, "seq-mean-token-mean", "sapo"),
}


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_technique_through_a_training_step(tiny_model_path, name):
    """Two optimizer steps of whole groups, each with both advantage signs (the second step's ratios
    have moved): ``loss/policy`` and the objective's scalars equal the pure function's on the tensors
    the update used; ``clip/*``, the PPO clip's statistics, are not logged."""
    make, aggregation, prefix = OBJECTIVES[name]
    recorder = RecordMicroBatches()
    module, observe = step(
        tiny_model_path,
        batch(),
        [make(), LossAggregation(aggregation), recorder],
        num_mini_batches=2,
        mini_batch_split="group",
    )
    scalars = observe.scalars
    objective = policy_objective(module.loss_config.objective)
    assert objective.name == name
    kwargs = objective_kwargs(module.loss_config)
    totals: dict[str, list[float]] = {}
    loss = 0.0
    for version in sorted({v for v, *_ in recorder.micro}):
        micro = [m for m in recorder.micro if m[0] == version]
        # The denominator of the optimizer step: all of its micro-batches (one rank).
        denominator = sum(aggregation_denominator(mask, aggregation) for *_, mask in micro)
        for _, logprobs, old, advantages, mask in micro:
            token_loss, stats = objective.fn(logprobs, old, advantages, mask, **kwargs)
            loss += float(aggregate_loss(token_loss, mask, aggregation, denominator)) / 2
            for key, (total, count) in stats.items():
                acc = totals.setdefault(key, [0.0, 0.0])
                acc[0], acc[1] = acc[0] + float(total), acc[1] + float(count)
    assert len({v for v, *_ in recorder.micro}) == 2
    moved = max(float(((lp - old) * mask).abs().max()) for v, lp, old, _, mask in recorder.micro if v == 1)
    assert moved > 1e-3, "the second mini-batch's ratios did not move: the step tests nothing off-policy"
    assert scalars["loss/policy"] == pytest.approx(loss, rel=1e-6, abs=1e-9)
    for key, (total, count) in totals.items():
        assert scalars[f"{prefix}/{key}"] == pytest.approx(total / count if count else 0.0, rel=1e-6, abs=1e-9)
    assert not any(tag.startswith("clip/") for tag in scalars), sorted(scalars)


# -- the recipes ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("recipe", "objective", "args"),
    [
        ("gspo", "gspo", {"clip_low": 3e-4, "clip_high": 4e-4}),
        ("cispo", "cispo", {"eps_low_is": None, "eps_high_is": 4.0}),
        ("sapo", "sapo", {"tau_pos": 1.0, "tau_neg": 1.05}),
    ],
)
def test_recipe_configures_the_papers_objective(recipe, objective, args):
    """The recipe's techniques, built from its YAML as the CLI does (class_path + init_args), choose the
    objective with the paper's settings and aggregation, next to one advantage estimator."""
    config = yaml.safe_load((REPO / "configs" / "recipes" / f"{recipe}.yaml").read_text())
    techniques = []
    for entry in config["trainer"]["callbacks"]:
        module_name, _, class_name = entry["class_path"].rpartition(".")
        callback = getattr(importlib.import_module(module_name), class_name)(**entry.get("init_args", {}))
        if isinstance(callback, Technique):
            techniques.append(callback)
    clip_eps = config["model"]["clip_eps"]
    loss_config = build_loss_config(PolicyLossConfig(clip_low=clip_eps, clip_high=clip_eps), techniques)
    assert config["recipe"] == recipe and advantage_estimator(techniques) is not None
    assert (loss_config.objective, loss_config.objective_args) == (objective, args)
    assert loss_config.aggregation == policy_objective(objective).aggregation
