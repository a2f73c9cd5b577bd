"""The frozen reference policy that KL terms compare with (``KLPenalty``, ``ReinforcePlusPlus``'s
KL-shaped return): loaded once at fit start, scored exactly like the policy."""

from __future__ import annotations

import torch

from lite_ppo.policy_module import PolicyModule
from lite_ppo.rollout.batch import RolloutBatch


class ReferencePolicy:
    """A frozen copy of the *initial* policy, loaded from ``path`` (the policy's own ``model_path``
    when None), so a resumed run still compares with the starting weights. When the policy trains
    LoRA adapters and no path is given, the reference is the policy itself with its adapters off (its
    frozen base, ``LitePPO.adapters_disabled``): nothing is loaded and no second copy is held.

    Example::

        reference = ReferencePolicy(None)
        reference.load(module)                       # at fit start
        ref_logprobs = reference.logprobs(module, batch)
    """

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self.model: torch.nn.Module | None = None
        self.is_base = False  # the policy's own frozen base (LoRA): scored with the adapters off

    def load(self, module: PolicyModule) -> None:
        """Load the reference for ``module`` (nothing when it is loaded already or is the LoRA base)."""
        if self.model is not None or self.is_base:
            return
        if self.path is None and module.has_adapters:
            self.is_base = True
            return
        # Laid out like the policy: partitioned over the ranks under ZeRO-3.
        self.model = module.load_frozen_model(self.path or module.model_path)

    def release(self) -> None:
        """Free the memory (at fit end)."""
        self.model = None
        self.is_base = False

    @torch.no_grad()
    def logprobs(self, module: PolicyModule, batch: RolloutBatch) -> torch.Tensor:
        """log pi_ref of the response tokens of ``batch`` in one forward: [b, R] (zero on padding),
        scored exactly as the module scores the policy (same positions, temperature, packing)."""
        if self.is_base:
            with module.adapters_disabled():
                return module.score_responses(batch, with_entropy=False)[0]
        if self.model is None:
            raise RuntimeError("the reference policy is not loaded: it is loaded at fit start")
        return module.score_responses(batch, model=self.model, with_entropy=False)[0]

    @torch.no_grad()
    def logprobs_by_micro_batch(self, module: PolicyModule, batch: RolloutBatch) -> torch.Tensor:
        """:meth:`logprobs` of a whole step's batch, one forward per micro-batch of the module's plan
        (``LitePPO.micro_batch_rows``: under ZeRO-3 every rank runs as many): [B, R]."""
        out = torch.zeros(batch.response_mask.shape, dtype=torch.float32, device=batch.response_mask.device)
        for rows in module.micro_batch_rows(batch):
            out[rows.to(out.device)] = self.logprobs(module, batch.select(rows)).float()
        return out
