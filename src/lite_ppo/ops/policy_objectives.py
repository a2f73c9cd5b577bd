"""The registry of policy objectives: which per-token loss the update minimises, by name.

Every objective is a pure function with one signature::

    objective(logprobs [B, T], old_logprobs [B, T], advantages [B] or [B, T], mask [B, T], **params)
        -> (loss [B, T], statistics {name: (total, count)})

The module aggregates ``loss`` (``aggregate_loss``, with the configured aggregation and the global
denominator) and logs each statistic as ``<prefix>/<name>``, a mean ``sum(total) / sum(count)`` over
the step's micro-batches and ranks. A technique chooses one in ``configure_loss`` by name
(``{"objective": "gspo", "objective_args": {...}}``); the module only looks the name up here.

Built in: ``ppo_clip`` (the default; the PPO-clip fields of ``PolicyLossConfig``), ``gspo`` and
``gspo_token`` (:mod:`lite_ppo.ops.gspo`), ``cispo`` (:mod:`lite_ppo.ops.cispo`), ``sapo``
(:mod:`lite_ppo.ops.sapo`). A user's technique may register its own with :func:`register_policy_objective`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from lite_ppo.ops.cispo import cispo
from lite_ppo.ops.gspo import gspo, gspo_token
from lite_ppo.ops.policy_loss import ppo_clip
from lite_ppo.ops.sapo import sapo

ObjectiveFn = Callable[..., tuple[torch.Tensor, dict[str, tuple[torch.Tensor, torch.Tensor]]]]
# The four tensors every objective takes first; the rest of its signature is its parameters.
_TENSORS = ("logprobs", "old_logprobs", "advantages", "mask")


@dataclass(frozen=True)
class PolicyObjective:
    """One registered objective.

    - ``name``: what ``PolicyLossConfig.objective`` says.
    - ``fn``: the pure function (signature in the module docstring).
    - ``prefix``: its statistics are logged as ``<prefix>/<name>``.
    - ``config_fields``: ``PolicyLossConfig`` fields passed to ``fn`` as keyword arguments (the PPO
      clip range: ``clip_low``, ``clip_high``, ``dual_clip``); other parameters come from
      ``PolicyLossConfig.objective_args``. A technique that sets a field the chosen objective does
      not read is refused at fit start.
    - ``aggregation``: the loss aggregation of the objective's paper, or None when any fits; the
      module warns when the configured one differs.
    - ``token_level``: each token's loss depends on its own log-prob only, so a token weight scales
      exactly that token's gradient (False for ``gspo``, whose sequence ratio couples a response's
      tokens: techniques whose token weights act on single tokens are refused with it).
    """

    name: str
    fn: ObjectiveFn
    prefix: str
    config_fields: tuple[str, ...] = ()
    aggregation: str | None = None
    token_level: bool = True

    @property
    def parameters(self) -> tuple[str, ...]:
        """The keyword parameters of ``fn`` after the four tensors."""
        return tuple(p for p in inspect.signature(self.fn).parameters if p not in _TENSORS)

    def check_args(self, args: Mapping[str, Any]) -> None:
        """Refuse ``objective_args`` the function does not take (a misspelt parameter would be dropped)."""
        allowed = [p for p in self.parameters if p not in self.config_fields]
        unknown = sorted(set(args) - set(allowed))
        if unknown:
            raise ValueError(
                f"policy objective {self.name!r} takes {', '.join(allowed) or 'no arguments'}; "
                f"got {', '.join(map(repr, unknown))}"
            )


POLICY_OBJECTIVES: dict[str, PolicyObjective] = {}


def register_policy_objective(objective: PolicyObjective) -> PolicyObjective:
    """Add ``objective`` to the registry (a second one of the same name is refused)."""
    known = POLICY_OBJECTIVES.get(objective.name)
    if known is not None and known != objective:
        raise ValueError(f"a policy objective named {objective.name!r} is already registered")
    missing = [p for p in _TENSORS if p not in inspect.signature(objective.fn).parameters]
    if missing:
        raise ValueError(f"policy objective {objective.name!r}: its function lacks the arguments {missing}")
    POLICY_OBJECTIVES[objective.name] = objective
    return objective


def policy_objective(name: str) -> PolicyObjective:
    """The registered objective ``name``; a one-line error listing the choices otherwise."""
    if name not in POLICY_OBJECTIVES:
        raise ValueError(f"unknown policy objective {name!r}; choose one of {', '.join(POLICY_OBJECTIVES)}")
    return POLICY_OBJECTIVES[name]


register_policy_objective(
    PolicyObjective("ppo_clip", ppo_clip, prefix="clip", config_fields=("clip_low", "clip_high", "dual_clip"))
)
register_policy_objective(
    PolicyObjective("gspo", gspo, prefix="gspo", aggregation="seq-mean-token-mean", token_level=False)
)
register_policy_objective(PolicyObjective("gspo_token", gspo_token, prefix="gspo", aggregation="seq-mean-token-mean"))
register_policy_objective(PolicyObjective("cispo", cispo, prefix="cispo", aggregation="token-mean"))
register_policy_objective(PolicyObjective("sapo", sapo, prefix="sapo", aggregation="seq-mean-token-mean"))
