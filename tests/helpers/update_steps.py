"""One training step of :class:`LitePPO` on a small hand-made rollout batch, with what the update
computed recorded, so that two layouts of the same update can be compared.

Equivalence is judged on what the code computes — old log-probs, the loss, the gradient
accumulated for each optimizer step — and on the weights after the step only under plain SGD.
Adam is not used for that: its step lr * m / (sqrt(v) + eps) moves every weight by about lr
whatever the gradient's size, so a near-zero gradient component that rounds differently on another
CPU moves its weight by up to ~lr, as a real one would.
"""

from __future__ import annotations

import torch

from helpers.fits import fit_one_batch
from lite_ppo import LitePPO
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.technique import Technique

ADVANTAGES = torch.tensor([1.0, -1.0, 0.5, -0.5, 0.8, -0.3, 0.2, -0.9])
# batch(): 4 groups of 2; prompts of 2, 4, 3, 2 tokens (per group), responses of 5,1 | 3,4 | 2,5 | 3,1.
PROMPTS, RESPONSES = [2, 2, 4, 4, 3, 3, 2, 2], [5, 1, 3, 4, 2, 5, 3, 1]

# fp32 unit roundoff (2^-24).
UNIT_ROUNDOFF = 2.0**-24
# Gradient tolerance, relative to the largest |entry| of the tensor. Two layouts of the same
# update sum the same products in a different order (packed rows vs padded ones, other matmul
# blockings, attention over a longer masked row). Each reordered sum of n terms errs by at most
# ~n*u of the sum of |terms| (Higham's gamma_n), typically sqrt(n)*u; the largest sums here are
# over the vocabulary (768) and the attention width (256), so sqrt(768)*u per sum. Back-propagation
# through the tiny model chains about 40 such sums (2 layers x (norm, q/k/v/o, softmax, 3 MLP
# matmuls) forward and backward, the head and the log-softmax), and errors add: 40 * sqrt(768) * u
# ~ 6.6e-5, so 1e-4 of the tensor's scale. A wrong layout (a token attending one position too far,
# a dropped micro-batch) changes gradients by a sizeable fraction of their scale, >= 1e-2 here.
GRAD_RTOL = 40 * 768**0.5 * UNIT_ROUNDOFF * 1.5


class FixedAdvantages(Technique):
    def compute_advantages(self, ctx, batch):
        return ADVANTAGES.to(batch.rewards.device, copy=True)


class Observe(Technique):
    """Records the old log-probs the update used, the step's scalars and, before every optimizer
    step, the accumulated gradient of every policy parameter (``grads[k][name]``)."""

    def on_fit_start(self, trainer, pl_module):
        self.grads: list[dict[str, torch.Tensor]] = []
        names = {p: n for n, p in pl_module.policy.named_parameters()}

        def record(optimizer, args, kwargs):
            self.grads.append(
                {names[p]: p.grad.detach().clone() for g in optimizer.param_groups for p in g["params"] if p in names}
            )

        trainer.optimizers[0].register_step_pre_hook(record)

    def observe_old_logprobs(self, ctx, batch):
        self.old = batch.old_logprobs.detach().clone()

    def on_update_end(self, ctx, batch, stats):
        self.scalars = {k: float(v) for k, v in stats.scalars.items()}


class SGDLitePPO(LitePPO):
    """LitePPO with plain SGD at a constant learning rate: the weights after a step are
    ``w - lr * g``, so weight differences stay of the order of ``lr`` times the gradient's rounding."""

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.policy.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def batch(engine_shift: float | None = None, true_logprobs: torch.Tensor | None = None, seed: int = 0) -> RolloutBatch:
    """8 responses (4 groups of 2) with left-padded prompts of 2-4 tokens and responses of 1-5 tokens;
    ``seed`` draws the token ids."""
    gen = torch.Generator().manual_seed(seed)
    p, r = max(PROMPTS), max(RESPONSES)
    input_ids = torch.zeros(8, p + r, dtype=torch.long)
    attention_mask = torch.zeros(8, p + r, dtype=torch.long)
    response_mask = torch.zeros(8, r)
    prompts = [torch.randint(3, 60, (pl,), generator=gen) for pl in PROMPTS[::2]]  # one per group
    for i, (pl, rl) in enumerate(zip(PROMPTS, RESPONSES)):
        input_ids[i, p - pl : p] = prompts[i // 2]
        input_ids[i, p : p + rl] = torch.randint(3, 60, (rl,), generator=gen)
        attention_mask[i, p - pl : p + rl] = 1
        response_mask[i, :rl] = 1
    engine = None
    if true_logprobs is not None:
        engine = (true_logprobs + (engine_shift or 0.0)) * response_mask
    return RolloutBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        response_mask=response_mask,
        group_ids=torch.arange(8) // 2,
        rewards=torch.zeros(8),
        truncated=torch.zeros(8, dtype=torch.bool),
        response_lengths=torch.tensor(RESPONSES),
        engine_logprobs=engine,
        temperature=0.9,
    )


def step(
    model_path: str,
    rollout: RolloutBatch,
    extra: list[Technique] = (),
    optimizer: str = "adamw",
    accelerator: str = "cpu",
    **kwargs,
) -> tuple[LitePPO, Observe]:
    """One training step (``num_mini_batches`` optimizer steps) at lr 1e-2, fixed advantages.

    ``optimizer``: ``adamw`` (the module's own) or ``sgd`` (:class:`SGDLitePPO`, for comparing weights).
    ``accelerator``: Lightning's (``"gpu"`` for ``benchmarks/gpu_check.py``).
    """
    torch.manual_seed(0)
    cls = {"adamw": LitePPO, "sgd": SGDLitePPO}[optimizer]
    module = cls(**{"model_path": model_path, "lr": 1e-2, "max_grad_norm": None, "micro_batch_size": 3, **kwargs})
    observe = Observe()
    fit_one_batch(module, rollout, [FixedAdvantages(), observe, *extra], accelerator=accelerator)
    return module, observe


def assert_close_to_scale(actual: torch.Tensor, expected: torch.Tensor, rtol: float, msg: str = "") -> None:
    """``|actual - expected| <= rtol * max|expected|`` elementwise: rounding relative to the tensor's scale."""
    scale = expected.abs().max().item()
    worst = (actual - expected).abs().max().item()
    assert worst <= rtol * scale, f"{msg}: max difference {worst:.3e} > {rtol:.1e} x scale {scale:.3e}"


def assert_same_update(a: LitePPO, seen_a: Observe, b: LitePPO, seen_b: Observe) -> None:
    """The two steps computed the same update: old log-probs, loss and entropy, the gradient of every
    optimizer step to float rounding (:data:`GRAD_RTOL`), and under SGD the weights after it."""
    torch.testing.assert_close(seen_a.old, seen_b.old, atol=2e-5, rtol=1e-5)
    assert (
        abs(seen_a.scalars["loss/policy"] - seen_b.scalars["loss/policy"])
        <= 1e-4 * abs(seen_b.scalars["loss/policy"]) + 1e-7
    )
    assert abs(seen_a.scalars["policy/entropy"] - seen_b.scalars["policy/entropy"]) <= 1e-5 * abs(
        seen_b.scalars["policy/entropy"]
    )
    assert len(seen_a.grads) == len(seen_b.grads) == a.policy_version == b.policy_version
    for k, (grads_a, grads_b) in enumerate(zip(seen_a.grads, seen_b.grads, strict=True)):
        assert grads_a.keys() == grads_b.keys()
        for name in grads_b:
            assert_close_to_scale(grads_a[name], grads_b[name], GRAD_RTOL, msg=f"optimizer step {k}, {name}.grad")
    if isinstance(a, SGDLitePPO) and isinstance(b, SGDLitePPO):
        # w_after = w_0 - lr * sum_k g_k: weight differences are lr times the gradients' rounding.
        lr = a.hparams.lr
        for (name, x), y in zip(a.policy.named_parameters(), b.policy.parameters(), strict=True):
            scale = max(g[name].abs().max().item() for g in seen_b.grads)
            tolerance = lr * len(seen_b.grads) * GRAD_RTOL * scale + 4 * UNIT_ROUNDOFF * y.abs().max().item()
            worst = (x - y).abs().max().item()
            assert worst <= tolerance, f"{name} after the update: {worst:.3e} > {tolerance:.3e}"
