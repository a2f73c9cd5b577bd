"""The technique hook contract: the one place that says which RL hooks exist, in which order they
run and what each may change.

A technique is a Lightning ``Callback`` that subclasses :class:`Technique` and overrides some of
the hooks below. Hooks *return* what they change and the caller combines the answers, so the
result never depends on the order of the callbacks; the batch a hook receives is read-only (the
module and the rollout callback build the next batch with :func:`dataclasses.replace`). Built-in
techniques (``lite_ppo.callbacks``) use exactly this contract; a user's technique in their own
file does too. A method of a technique that looks like a hook but is not one (``on_advantage``)
is refused before any weights load (:func:`check_hook_names`, in the module's ``setup``).

Every per-step hook takes the same first argument, the step's :class:`~lite_ppo.step_context.StepContext`
(``ctx.trainer``, ``ctx.module``, ``ctx.metrics``, ``ctx.settings``, ``ctx.techniques``, ``ctx.ranks``),
then what the hook is about:
``hook(self, ctx, batch)``; ``extra_loss_terms(self, ctx, minibatch)``; ``on_update_end(self, ctx,
batch, stats)``. A technique written with the earlier signatures (``trainer, module, batch[,
metrics]``) still runs for one release, through an adapter, with one deprecation line naming the
hooks to rewrite (:func:`adapt_legacy_hooks`).

Order within one training step: :data:`HOOK_ORDER`, the stages of ``LitePPO.training_step`` (1
rollout, 2 advantages, 3 loss masks, 4 old log-probs, 5 update, 6 statistics) and the hooks each
runs. CONTRIBUTING.md's hook table is generated from it (``python -m lite_ppo.technique``).

Old log-probs: by default (``model.old_logprobs: reuse_first``) the first mini-batch takes its old
log-probs from its own forward pass (the policy has not moved yet, so they are exact), and only the
other rows get a separate no-gradient pass. ``token_weights``, ``policy_mask`` and ``before_update``
need every old log-prob before the first optimizer step, so a technique that overrides one makes the
module compute them all first (``recompute``); a technique that only reads them uses
``observe_old_logprobs``, which costs nothing. A technique that sets :attr:`Technique.needs_old_entropy` also gets
``batch.old_entropy``, each token's entropy under pi_old, from that same pass.

``configure_loss`` runs once, at fit start (clip range, aggregation, ...). Scalars a technique wants
on TensorBoard go into the step's :class:`~lite_ppo.step_metrics.StepMetrics` (``ctx.metrics``):
the module reduces them once over micro-batches and ranks and logs them
with its own at the end of the step, so a technique never writes a rank reduction itself.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import torch
from lightning.pytorch import Callback
from lightning.pytorch.utilities import rank_zero_warn

from lite_ppo.errors import UserError
from lite_ppo.ops.policy_objectives import POLICY_OBJECTIVES, policy_objective
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.rollout.settings import RunSettings
from lite_ppo.step_context import StepContext
from lite_ppo.step_metrics import StepMetrics

if TYPE_CHECKING:  # pragma: no cover
    from lightning.pytorch import Trainer

    from lite_ppo.policy_module import PolicyModule


AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


@dataclass
class PolicyLossConfig:
    """What the policy objective and its aggregation use. Techniques set fields in
    ``configure_loss`` (at fit start); two techniques setting the same field is a configuration error.

    - ``clip_low`` / ``clip_high``: the ``ppo_clip`` range [1 - clip_low, 1 + clip_high] (docs/method.md).
      Both start at the module's ``clip_eps``; a technique may widen the upper side, and the lower
      side has one source, ``model.clip_eps`` (:func:`build_loss_config` refuses a disagreement).
    - ``dual_clip``: constant c > 1 bounding the loss of negative-advantage tokens, or None.
    - ``aggregation``: ``token-mean`` (L_tok), ``seq-mean-token-mean`` (L_seq), ``seq-mean-token-sum``
      or ``seq-mean-token-sum-norm`` (Dr. GRPO; ``lite_ppo.ops.aggregation`` gives each normalizer).
    - ``generation_budget``: the constant L_max of ``seq-mean-token-sum-norm`` (tokens), else None.
    - ``objective``: the per-token policy loss, a name of ``lite_ppo.ops.POLICY_OBJECTIVES``:
      ``ppo_clip`` (the default, the clipped surrogate with the clip fields above), ``gspo``,
      ``gspo_token``, ``cispo``, ``sapo``. A technique that sets a clip field the chosen objective
      does not read is refused at fit start.
    - ``objective_args``: the other objectives' own parameters (keyword arguments of their function),
      e.g. ``{"clip_low": 3e-4, "clip_high": 4e-4}`` for ``gspo``.
    """

    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float | None = None
    aggregation: str = "token-mean"
    generation_budget: int | None = None
    objective: str = "ppo_clip"
    objective_args: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        policy_objective(self.objective).check_args(self.objective_args)
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"unknown loss aggregation {self.aggregation!r}; choose one of {AGGREGATIONS}")
        if not 0 <= self.clip_low < 1:
            raise ValueError(f"clip_low must be in [0, 1), got {self.clip_low}")
        if self.clip_high < 0:
            raise ValueError(f"clip_high must be >= 0, got {self.clip_high}")
        if self.dual_clip is not None and self.dual_clip <= 1:
            raise ValueError(f"dual_clip must be > 1, got {self.dual_clip}")
        if self.aggregation == "seq-mean-token-sum-norm" and (self.generation_budget or 0) < 1:
            raise ValueError(f"seq-mean-token-sum-norm needs a generation_budget >= 1, got {self.generation_budget}")


@dataclass
class MiniBatchContext:
    """What ``extra_loss_terms`` sees for one micro-batch.

    - ``batch``: the micro-batch (``loss_mask`` says which tokens count).
    - ``logprobs`` [b, R] and ``entropy`` [b, R]: of the response tokens under the current policy
      at the sampling temperature, with gradients (0 off ``response_mask``).
    - ``metrics``: the step's accumulator.
    - ``logits`` [b, R, V] (temperature-scaled, with gradients): computed on first use by one more
      forward pass, since the module scores tokens without keeping full-vocabulary logits; prefer
      ``logprobs`` / ``entropy`` when they suffice.
    - ``rows`` [b]: the micro-batch's rows in this rank's training batch (the batch ``token_weights``
      and ``policy_mask`` saw), so a technique can pick up what it decided per token before the update.
    """

    batch: RolloutBatch
    logprobs: torch.Tensor
    entropy: torch.Tensor | None = None
    metrics: StepMetrics = field(default_factory=StepMetrics)
    compute_logits: Callable[[], torch.Tensor] | None = field(default=None, repr=False)
    rows: torch.Tensor | None = None

    @cached_property
    def logits(self) -> torch.Tensor:
        if self.compute_logits is None:
            raise RuntimeError("this MiniBatchContext was built without a way to compute logits")
        return self.compute_logits()


@dataclass(frozen=True)
class UpdateStats:
    """What one training step's update measured, over all ranks (``on_update_end`` reads it).

    The typed fields are the quantities techniques and diagnostics reason about; ``scalars`` holds
    every value the module logs this step, by TensorBoard tag (``lite_ppo.metric_names``). The clip
    fields are the default ``ppo_clip`` objective's (0 under another, whose statistics are in ``scalars``).
    """

    policy_loss: float = 0.0
    clip_fraction: float = 0.0
    clip_upper: float = 0.0  # share of A > 0 tokens clipped at 1 + clip_high
    clip_lower: float = 0.0  # share of A < 0 tokens clipped at 1 - clip_low
    approx_kl: float = 0.0
    entropy: float = 0.0
    grad_norm: float = 0.0
    learning_rate: float = 0.0
    scalars: dict[str, torch.Tensor] = field(default_factory=dict)


class Technique(Callback):
    """Base class of every RL technique. Override only the hooks you need (mark them ``@override``).

    Example, a length penalty in a user's own file (enable it with ``class_path: my_file.LengthPenalty``
    under ``trainer.callbacks``)::

        class LengthPenalty(Technique):
            def __init__(self, per_token: float = 1e-3):
                self.per_token = per_token

            @override
            def shape_rewards(self, ctx, batch):
                penalty = self.per_token * batch.response_lengths.float()
                ctx.metrics.mean("length_penalty/mean", penalty.sum(), penalty.numel())
                return -penalty
    """

    #: Set True when a hook reads ``batch.old_entropy`` (each token's entropy under pi_old): the
    #: module's no-gradient old-log-prob pass then computes it too (the same forward, a little more
    #: work per token), and old log-probs are computed for all rows before the first optimizer step.
    needs_old_entropy: bool = False
    #: Set True when the technique's ``token_weights`` are meant to remove or scale single tokens'
    #: gradients: it is refused at fit start with an objective whose token losses share a sequence
    #: ratio (GSPO), where a weight only rescales a whole response and every token keeps its gradient.
    #: (A ``policy_mask`` works there: the objective's ratio is then taken over the kept tokens.)
    needs_token_level_objective: bool = False
    #: Set True (on the advantage estimator) when ``compute_advantages`` returns one advantage per
    #: token [B, R] instead of one per response [B]: an objective that needs one per response (GSPO's
    #: sequence ratio) is then refused at fit start.
    per_token_advantages: bool = False
    #: Set True when two instances of the technique are meant to apply together (e.g. two masks of
    #: different rows); otherwise a technique given twice is refused at start with one line.
    repeatable: bool = False
    #: Techniques that cannot run beside this one, by class name, each with the reason: a run with
    #: both is refused at fit start with one line (:func:`refuse_conflicting_techniques`).
    conflicts_with: dict[str, str] = {}

    # -- fit start -------------------------------------------------------------------------------
    def configure_run(self, settings: RunSettings) -> None:
        """Once, at setup (fit, validate), before any weights load: the run's rollout settings
        (sampling, the generation budget, the engine; :class:`~lite_ppo.rollout.settings.RunSettings`).
        Check what the technique needs of them here (an error then stops the run before it starts).
        Any callback that declares this method receives them (a
        :class:`~lite_ppo.rollout.settings.SettingsListener`): none looks up the rollout callback."""

    # -- rollout callback ------------------------------------------------------------------------
    def shape_rewards(self, ctx: StepContext, batch: RolloutBatch) -> torch.Tensor | None:
        """Return a reward term [B] added to ``batch.rewards`` (reward shaping), or None.

        ``batch.rewards`` are the verifier's; the terms of all techniques add up, in any order.
        """
        return None

    def on_rollout(self, ctx: StepContext, batch: RolloutBatch) -> None:
        """After every technique's reward shaping (read-only): observe a generated batch."""

    def keep_groups(self, ctx: StepContext, batch: RolloutBatch) -> torch.Tensor | None:
        """Return a bool mask [B] of responses to keep (whole groups), or None to keep all.

        When responses are dropped the rollout callback generates more prompts to refill the batch.
        """
        return None

    # -- module ----------------------------------------------------------------------------------
    def compute_advantages(self, ctx: StepContext, batch: RolloutBatch) -> torch.Tensor:
        """Return advantages [B] for ``batch``. Exactly one configured technique overrides this."""
        raise NotImplementedError

    def loss_mask(self, ctx: StepContext, batch: RolloutBatch) -> torch.Tensor | None:
        """After advantages: return a mask [B, R] (0/1) multiplied into ``batch.loss_mask``, or None."""
        return None

    def token_weights(self, ctx: StepContext, batch: RolloutBatch) -> torch.Tensor | None:
        """After ``batch.old_logprobs`` are computed, before the first optimizer step: return
        per-token weights [B, R] of the surrogate loss (multiplied with other techniques'), or None."""
        return None

    def policy_mask(self, ctx: StepContext, batch: RolloutBatch) -> torch.Tensor | None:
        """After ``token_weights``, before the first optimizer step: return a 0/1 mask [B, R] of the
        tokens the policy loss is averaged over (masks multiply), or None for all of ``loss_mask``.

        Unlike a weight of 0, a masked-out token also leaves the policy loss's denominator (token or
        sequence count), so the loss is a mean over the selected tokens; ``extra_loss_terms`` and
        the diagnostics keep ``loss_mask``.
        """
        return None

    def before_update(self, ctx: StepContext, batch: RolloutBatch) -> None:
        """After ``policy_mask``, before the first optimizer step (read-only): every old log-prob,
        advantage, weight and mask of the batch is known; decide what the update needs (e.g. the
        tokens a penalty will act on, read back in ``extra_loss_terms`` through ``minibatch.rows``)."""

    def observe_old_logprobs(self, ctx: StepContext, batch: RolloutBatch) -> None:
        """After the update (read-only): ``batch.old_logprobs`` holds the trainer's log-probs of
        every response token before the first optimizer step (and ``batch.engine_logprobs`` the
        engine's, when it reports them). Record diagnostics in ``ctx.metrics``."""

    def configure_loss(self, config: PolicyLossConfig) -> dict[str, Any]:
        """At fit start: return the fields of ``config`` this technique sets, e.g. ``{"clip_high": 0.28}``."""
        return {}

    def extra_loss_terms(self, ctx: StepContext, minibatch: MiniBatchContext) -> dict[str, torch.Tensor]:
        """Return per-token loss terms [b, R] (coefficient included) added to the policy loss.

        The module aggregates them with the configured aggregation, so they are weighted exactly
        like the surrogate, and logs each as ``loss/<name>``.
        """
        return {}

    def on_update_end(self, ctx: StepContext, batch: RolloutBatch, stats: UpdateStats) -> None:
        """After the last optimizer step of the training step. Read-only; log here."""

    # -- any callback ----------------------------------------------------------------------------
    def on_phase(self, trainer: Trainer, module: PolicyModule) -> None:
        """During a training step, whenever its phase changes: ``module.phase`` is what runs now, e.g.
        ``("generating", 0, 0)`` or ``("updating", 2, 4)``, None when the step is over. The module calls
        it on every callback that defines it (the console's progress bar shows the phase)."""


@dataclass(frozen=True)
class HookDoc:
    """One row of the hook table: the hook with its arguments, when it runs (the stage of
    ``LitePPO.training_step``), what it returns and what it is for."""

    signature: str
    runs: str
    returns: str
    use: str

    @property
    def name(self) -> str:
        return self.signature.split("(", 1)[0]

    @property
    def arguments(self) -> list[str]:
        return [a.strip() for a in self.signature.split("(", 1)[1].split(")", 1)[0].split(",") if a.strip()]


# The hooks in the order they run in one training step: the one telling of the order (CONTRIBUTING's
# table is generated from it, ``python -m lite_ppo.technique``, and tests/test_hook_contract.py compares).
HOOK_ORDER: tuple[HookDoc, ...] = (
    HookDoc(
        "configure_run(settings)",
        "once, at setup (fit, validate; before any weights load)",
        "nothing: the run's `RunSettings` (sampling, generation budget, engine) to check and keep",
        "a generation budget (Dr. GRPO), an overlong limit, an engine requirement",
    ),
    HookDoc(
        "configure_loss(config) -> dict",
        "once, at fit start (before any step)",
        "`PolicyLossConfig` fields",
        "clip range, dual clip, loss aggregation, policy objective (GSPO)",
    ),
    HookDoc(
        "shape_rewards(ctx, batch) -> [B] or None",
        "1 rollout: the rollout source, after scoring (every generation round, refills included)",
        "a reward term; the terms of all techniques are added to the verifier's rewards",
        "reward shaping (overlong penalty, length penalty)",
    ),
    HookDoc(
        "on_rollout(ctx, batch)",
        "1 rollout: after all shaping",
        "nothing (read-only)",
        "observing what was generated",
    ),
    HookDoc(
        "keep_groups(ctx, batch) -> [B] or None",
        "1 rollout: after `on_rollout`",
        "a bool mask over whole groups; masks are ANDed",
        "dynamic sampling; the callback refills the batch",
    ),
    HookDoc(
        "compute_advantages(ctx, batch) -> [B]",
        "2 advantages: exactly one technique",
        "advantages",
        "the advantage estimator (`AdvantageNormalization`)",
    ),
    HookDoc(
        "loss_mask(ctx, batch) -> [B, R] or None",
        "3 loss masks",
        "a 0/1 mask; masks multiply into `batch.loss_mask`",
        "overlong filtering",
    ),
    HookDoc(
        "token_weights(ctx, batch) -> [B, R] or None",
        "4 old log-probs: after them, before the first optimizer step",
        "per-token weights of the surrogate; weights multiply",
        "importance-sampling corrections, Clip-Cov",
    ),
    HookDoc(
        "policy_mask(ctx, batch) -> [B, R] or None",
        "4 old log-probs: after `token_weights`",
        "a 0/1 mask of the tokens the policy loss is averaged over (they alone count in its denominator); "
        "masks multiply",
        "high-entropy tokens",
    ),
    HookDoc(
        "before_update(ctx, batch)",
        "4 old log-probs: after `policy_mask`",
        "nothing (read-only): every old log-prob, advantage, weight and mask known",
        "choosing tokens for a penalty (KL-Cov)",
    ),
    HookDoc(
        "extra_loss_terms(ctx, minibatch) -> {name: [b, R]}",
        "5 update: every micro-batch",
        "per-token loss terms",
        "KL loss, entropy bonus",
    ),
    HookDoc(
        "observe_old_logprobs(ctx, batch)",
        "6 statistics: after the update",
        "nothing (read-only): every old log-prob",
        "drift diagnostics",
    ),
    HookDoc(
        "on_update_end(ctx, batch, stats)",
        "6 statistics: the step's scalars reduced",
        "nothing (read-only): the final batch, the typed `UpdateStats`",
        "reading the update",
    ),
    HookDoc(
        "on_phase(trainer, module)",
        "any stage, whenever the step's phase changes (any callback that defines it)",
        "nothing: `module.phase` is `(name, done, total)` or None",
        "showing progress",
    ),
)


def hook_table_markdown() -> str:
    """CONTRIBUTING's hook table, from :data:`HOOK_ORDER`."""
    rows = ["| hook | runs in stage | returns | typical use |", "| --- | --- | --- | --- |"]
    rows += [f"| `{h.signature}` | {h.runs} | {h.returns} | {h.use} |" for h in HOOK_ORDER]
    return "\n".join(rows) + "\n"


TECHNIQUE_HOOKS = tuple(
    name
    for name, _ in inspect.getmembers(Technique, inspect.isfunction)
    if not name.startswith("_") and name not in dir(Callback)
)
_REPLACED = {"on_advantages": "loss_mask (return the mask)", "on_old_logprobs": "token_weights (return the weights)"}


def check_hook_names(techniques: list[Technique]) -> None:
    """Refuse a technique method that looks like a hook but is not one (a misspelt hook would
    silently never run): names starting with ``on_`` that no Callback or Technique defines, and
    names close to a technique hook's."""
    known = set(TECHNIQUE_HOOKS) | {n for n in dir(Callback) if not n.startswith("_")}
    for technique in techniques:
        for cls in type(technique).__mro__:
            if cls in (Technique, Callback, object):
                break
            for name, value in vars(cls).items():
                if name.startswith("_") or name in known or not callable(value):
                    continue
                if name in _REPLACED:
                    raise UserError(
                        f"{type(technique).__name__}.{name} is no longer a hook: use {_REPLACED[name]} "
                        "(see lite_ppo.technique)"
                    )
                close = difflib.get_close_matches(name, sorted(known | set(_REPLACED)), n=1, cutoff=0.85)
                if name.startswith("on_") or close:
                    hint = ""
                    if close:  # a retired hook's name is pointed at what replaced it
                        hint = f"did you mean {_REPLACED[close[0]] if close[0] in _REPLACED else close[0]}? "
                    raise UserError(
                        f"{type(technique).__name__}.{name} is not a hook and would never run: {hint}"
                        f"technique hooks: {', '.join(TECHNIQUE_HOOKS)} (rename it, or prefix a helper with _)"
                    )


# The per-step hooks (every one takes ``ctx`` first) and, for the signatures before StepContext
# (``trainer, module, <the same arguments>[, metrics]``), whether the old form ended in the step's metrics.
STEP_HOOKS = tuple(h.name for h in HOOK_ORDER if h.arguments[:1] == ["ctx"])
_LEGACY_TOOK_METRICS = frozenset(
    {"shape_rewards", "loss_mask", "token_weights", "policy_mask", "before_update", "observe_old_logprobs"}
)


class _LegacyHook:
    """A hook written with the signature before StepContext, called with today's: ``hook(ctx, *args)``
    runs ``function(technique, ctx.trainer, ctx.module, *args[, ctx.metrics])``."""

    def __init__(self, function: Callable[..., Any], technique: Technique, takes_metrics: bool) -> None:
        self.function, self.technique, self.takes_metrics = function, technique, takes_metrics

    def __call__(self, ctx: StepContext, *args: Any) -> Any:
        metrics = (ctx.metrics,) if self.takes_metrics else ()
        return self.function(self.technique, ctx.trainer, ctx.module, *args, *metrics)


def _positional_arity(function: Callable[..., Any]) -> tuple[int, float]:
    """How many positional arguments ``function`` takes after ``self``: (required, at most)."""
    required, most = 0, 0.0
    for parameter in list(inspect.signature(function).parameters.values())[1:]:
        if parameter.kind is parameter.VAR_POSITIONAL:
            most = float("inf")
        elif parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            most += 1
            required += parameter.default is parameter.empty
    return required, most


def adapt_legacy_hooks(techniques: list[Technique]) -> None:
    """Let a technique written with the hook signatures before :class:`StepContext` run: each such hook
    (``shape_rewards(self, trainer, module, batch, metrics)``) is called through an adapter, and one
    deprecation line per technique names each hook's new signature (``hook(self, ctx, batch)``). A hook
    that takes neither form is refused with one line."""
    for technique in techniques:
        name, legacy = type(technique).__name__, []
        for hook in STEP_HOOKS:
            if not overrides(technique, hook):
                continue
            function = getattr(type(technique), hook)
            arguments = next(h.arguments for h in HOOK_ORDER if h.name == hook)
            old = len(arguments) + 1 + (hook in _LEGACY_TOOK_METRICS)  # ctx -> trainer, module
            required, most = _positional_arity(function)
            if required <= len(arguments) <= most:
                continue
            if required <= old <= most:
                setattr(technique, hook, _LegacyHook(function, technique, hook in _LEGACY_TOOK_METRICS))
                legacy.append(f"{hook}(self, {', '.join(arguments)})")
                continue
            raise UserError(
                f"{name}.{hook} takes {required} argument(s); write it as {hook}(self, {', '.join(arguments)}) "
                "(CONTRIBUTING.md, 'Write a new technique as a callback')"
            )
        if legacy:
            rank_zero_warn(
                f"{name}: hook signatures before StepContext (trainer, module, ...), run through an adapter for "
                f"this release: write {', '.join(legacy)}; ctx.trainer, ctx.module and ctx.metrics hold what the "
                "old arguments did",
                category=FutureWarning,
            )


def techniques_of(trainer: Trainer) -> list[Technique]:
    """The configured techniques, in callback order."""
    return [cb for cb in trainer.callbacks if isinstance(cb, Technique)]


def overrides(technique: Technique, hook: str) -> bool:
    return getattr(type(technique), hook) is not getattr(Technique, hook)


def needs_old_logprobs_up_front(technique: Technique) -> bool:
    """Whether ``technique`` reads every old log-prob (or old entropy) before the first optimizer
    step: it overrides ``token_weights``, ``policy_mask`` or ``before_update``, or sets ``needs_old_entropy``."""
    return technique.needs_old_entropy or any(
        overrides(technique, hook) for hook in ("token_weights", "policy_mask", "before_update")
    )


def refuse_repeated_techniques(classes: list[type]) -> None:
    """One line for a technique class given twice: two HighEntropyTokens would multiply their masks
    and log a share that is neither's, two of a stateful one would end in Lightning's "more than one
    stateful callback"; no shipped technique is meant to be given twice. A technique whose class sets
    ``repeatable = True`` may be."""
    seen: set[type] = set()
    for cls in classes:
        if isinstance(cls, type) and issubclass(cls, Technique) and not cls.repeatable:
            if cls in seen:
                raise UserError(
                    f"technique {cls.__name__} is given twice in trainer.callbacks; give it once with the "
                    "settings you want (a later --config updates an earlier one's init_args)"
                )
            seen.add(cls)


def refuse_conflicting_techniques(techniques: list[Technique]) -> None:
    """One line for two techniques that cannot run together (either one's ``conflicts_with``)."""
    present = {type(t).__name__ for t in techniques}
    for technique in techniques:
        for other, why in technique.conflicts_with.items():
            if other in present:
                raise UserError(f"conflicting techniques: {type(technique).__name__} and {other} {why}; keep one")


def advantage_estimator(techniques: list[Technique]) -> Technique:
    """The single technique that computes advantages; a clear error for none or several."""
    found = [t for t in techniques if overrides(t, "compute_advantages")]
    if not found:
        raise UserError(
            "no advantage estimator is configured: add one technique that computes advantages under "
            "trainer.callbacks, e.g. `class_path: lite_ppo.callbacks.AdvantageNormalization`"
        )
    if len(found) > 1:
        names = " and ".join(type(t).__name__ for t in found)
        raise UserError(f"conflicting techniques: {names} both compute advantages; keep exactly one")
    return found[0]


def build_loss_config(base: PolicyLossConfig, techniques: list[Technique]) -> PolicyLossConfig:
    """Apply every technique's ``configure_loss`` to a copy of ``base``; two setters of one field conflict."""
    config = PolicyLossConfig(**vars(base))
    owner: dict[str, str] = {}
    for t in techniques:
        for name, value in t.configure_loss(config).items():
            if not hasattr(config, name):
                raise ValueError(f"{type(t).__name__}.configure_loss sets unknown field {name!r}")
            if name == "clip_low" and value != base.clip_low:
                raise UserError(
                    f"{type(t).__name__} sets the lower clip to {value} but model.clip_eps is {base.clip_low}: "
                    f"the lower clip has one source; set model.clip_eps: {value} "
                    "(and leave the technique's lower clip null)"
                )
            if name in owner:
                raise UserError(
                    f"conflicting techniques: {owner[name]} and {type(t).__name__} both set the loss's {name!r}; "
                    "keep one"
                )
            owner[name] = type(t).__name__
            setattr(config, name, value)
    _check_objective_fields(config, owner)
    _check_token_selection(config, owner, techniques)
    _check_advantage_shape(config, owner, techniques)
    config.validate()
    return config


def objective_kwargs(config: PolicyLossConfig) -> dict[str, Any]:
    """The keyword arguments of the configured objective's function: the config fields it reads
    (``ppo_clip``: the clip range) and ``objective_args``."""
    objective = policy_objective(config.objective)
    return {name: getattr(config, name) for name in objective.config_fields} | dict(config.objective_args)


def _check_objective_fields(config: PolicyLossConfig, owner: dict[str, str]) -> None:
    """A technique's setting that the chosen objective never reads would be silently dropped
    (Clip-Higher's upper clip under GSPO): refuse it, naming both techniques."""
    objective = policy_objective(config.objective)
    own_fields = {f for o in POLICY_OBJECTIVES.values() for f in o.config_fields}
    for name, setter in owner.items():
        if name in own_fields and name not in objective.config_fields:
            chooser = owner.get("objective", "the configuration")
            raise UserError(
                f"conflicting techniques: {setter} sets the loss's {name!r}, which the {config.objective!r} "
                f"objective chosen by {chooser} does not use; keep one"
            )


def _check_token_selection(config: PolicyLossConfig, owner: dict[str, str], techniques: list[Technique]) -> None:
    """A technique whose token weights act on single tokens' gradients
    (``Technique.needs_token_level_objective``) is refused with an objective whose token losses share a
    sequence ratio, naming both."""
    if policy_objective(config.objective).token_level:
        return
    for t in techniques:
        if t.needs_token_level_objective:
            raise UserError(
                f"conflicting techniques: {type(t).__name__} weights single tokens' policy gradients, but the "
                f"{config.objective!r} objective chosen by {owner.get('objective', 'the configuration')} gives every "
                "token of a response the gradient of one sequence ratio (a weight rescales the whole response); "
                "keep one (or use gspo_token)"
            )


def _check_advantage_shape(config: PolicyLossConfig, owner: dict[str, str], techniques: list[Technique]) -> None:
    """Per-token advantages (``Technique.per_token_advantages``) are refused with an objective that
    takes one advantage per response (its token losses share a sequence ratio), naming both."""
    if policy_objective(config.objective).token_level:
        return
    for t in techniques:
        if t.per_token_advantages:
            raise UserError(
                f"conflicting techniques: {type(t).__name__} gives every token its own advantage, but the "
                f"{config.objective!r} objective chosen by {owner.get('objective', 'the configuration')} takes one "
                "advantage per response; keep one (or use gspo_token)"
            )


if __name__ == "__main__":  # python -m lite_ppo.technique > table.md
    print(hook_table_markdown(), end="")
