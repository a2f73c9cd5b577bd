"""High-entropy ("forking") tokens: the policy gradient on the top share of tokens by entropy only
(Wang et al. 2025, "Beyond the 80/20 Rule"; docs/method.md)."""

from __future__ import annotations

from typing import Literal

import torch
from typing_extensions import override

from lite_ppo import metric_names as names
from lite_ppo.errors import UserError
from lite_ppo.ops.token_selection import high_entropy_mask
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.step_context import StepContext
from lite_ppo.technique import Technique

DENOMINATORS = ("selected", "all")


class HighEntropyTokens(Technique):
    """Keeps the policy gradient on the ``share`` of the step's loss tokens with the highest entropy
    (``lite_ppo.ops.token_selection``): the ``ceil(share * N)`` tokens of the N loss tokens with the
    largest entropy H, ties going to the earlier token; the others leave the policy loss.

    **Which entropy.** pi_old's: the entropy of the policy that sampled the responses, before this
    step's first optimizer step, at the sampling temperature, computed by the module in its
    no-gradient old-log-prob pass (``needs_old_entropy``, so old log-probs are recomputed for every
    row). It is the uncertainty of the decision that produced each token, which is what the paper
    ranks, and it is all known before the update starts, so the threshold is one quantile over the
    **global batch**: every rank, every mini-batch and micro-batch of the step (gathered in rank
    order, so two ranks select exactly the tokens one process selects), and the selection holds for
    every optimizer step of the update. The authors' code ranks the entropy of its own update forward
    within each micro-batch of a rank: pi_old's in the first mini-batch, the partly updated policy's
    in the later ones (DAPO, their base, takes 16 optimizer steps per rollout batch).

    **Denominator.** ``selected`` (default, the authors' released code: ``agg_loss(loss_mask=
    response_mask * entropy_top_mask)``): the unselected tokens leave the policy loss's denominator
    too, so under ``token-mean`` the loss is the mean over the selected tokens (through the
    ``policy_mask`` hook; ``extra_loss_terms`` such as a KL or entropy term keep every loss token, as
    in the authors' code). ``all`` (TRL's ``top_entropy_quantile``): the unselected tokens get weight
    0 and stay in the denominator (``token_weights``): the same direction, a step about 1 / share
    times smaller under ``token-mean``.

    Logged: ``high_entropy/selected_share`` (share of the step's loss tokens whose surrogate keeps
    its gradient, all ranks: ceil(share * N) / N) and ``high_entropy/threshold`` (tau, the smallest
    selected entropy, nats). ``policy/entropy`` stays the mean over every loss token.

    Under GSPO the module hands the policy mask to the objective, so the sequence ratio is the
    geometric mean over the selected tokens and the gradient reaches them only; with ``all`` a weight
    of 0 would only rescale the response (every token keeps its gradient through the ratio), so that
    combination is refused at fit start.

    Args:
        share: rho, the share of tokens that keep their gradient, in (0, 1] (the paper: 0.2).
        denominator: ``selected`` or ``all`` (above).

    Example::

        trainer:
          callbacks:
            - class_path: lite_ppo.callbacks.HighEntropyTokens
              init_args: {share: 0.2}
    """

    needs_old_entropy = True  # the module's old-log-prob pass fills batch.old_entropy

    def __init__(self, share: float = 0.2, denominator: Literal["selected", "all"] = "selected") -> None:
        if not 0 < share <= 1:
            raise UserError(f"HighEntropyTokens.share must be in (0, 1] (the paper: 0.2), got {share}")
        if denominator not in DENOMINATORS:
            raise UserError(f"HighEntropyTokens.denominator must be selected or all, got {denominator!r}")
        self.share = float(share)
        self.denominator = denominator
        # weights of 0 (``all``) would only rescale a response under GSPO's sequence ratio: refused there
        self.needs_token_level_objective = denominator == "all"

    @override
    def token_weights(self, ctx: StepContext, batch: RolloutBatch) -> torch.Tensor | None:
        return self.selected_tokens(ctx, batch).float() if self.denominator == "all" else None

    @override
    def policy_mask(self, ctx: StepContext, batch: RolloutBatch) -> torch.Tensor | None:
        return self.selected_tokens(ctx, batch).float() if self.denominator == "selected" else None

    def selected_tokens(self, ctx: StepContext, batch: RolloutBatch) -> torch.Tensor:
        """The selected tokens [B, R] (bool) of this rank, by a quantile over every rank's loss tokens."""
        if batch.old_entropy is None:
            raise RuntimeError("HighEntropyTokens needs batch.old_entropy (the module fills it for needs_old_entropy)")
        tokens = batch.loss_mask > 0
        local = batch.old_entropy[tokens].double()  # row-major: rank r's tokens follow rank r-1's
        everything, offset = ctx.ranks.cat_varying(local)
        selected, threshold = high_entropy_mask(everything, self.share)
        mine = selected[offset : offset + local.numel()]
        ctx.metrics.mean(names.HIGH_ENTROPY_SELECTED_SHARE, mine.sum(), local.numel())
        ctx.metrics.max(names.HIGH_ENTROPY_THRESHOLD, threshold)  # one global value, the same on every rank
        out = torch.zeros_like(tokens)
        out[tokens] = mine.to(out.device)
        return out
