"""The technique hook contract: hooks return what they change, the module combines the answers in
an order-independent way, misspelt hooks are refused, and the step's scalars are reduced once."""

from __future__ import annotations

import itertools
import warnings

import pytest
import torch
from typing_extensions import override

from helpers.constructed_fit import constructed_batch, fit_constructed
from lite_ppo.errors import UserError
from lite_ppo.step_metrics import StepMetrics
from lite_ppo.strategies.ranks import Ranks
from lite_ppo.technique import TECHNIQUE_HOOKS, Technique, check_hook_names


# -- misspelt hooks ------------------------------------------------------------------------------------
class Misspelt(Technique):
    def on_advantage(self, trainer, module, batch):  # one letter short of nothing: not a hook
        pass


class NearMiss(Technique):
    def token_weight(self, trainer, module, batch, metrics):
        return None


class OldContract(Technique):
    def on_advantages(self, trainer, module, batch):
        batch.loss_mask[:] = 0


class Fine(Technique):
    @override
    def loss_mask(self, ctx, batch):
        return None

    def scores(self, batch):  # a helper whose name is far from every hook
        return batch.rewards

    def _private(self):
        return None


def test_misspelt_and_retired_hooks_are_refused_naming_them():
    with pytest.raises(
        UserError, match=r"Misspelt.on_advantage is not a hook.*did you mean loss_mask \(return the mask\)\?"
    ):
        check_hook_names([Fine(), Misspelt()])
    with pytest.raises(UserError, match=r"NearMiss.token_weight is not a hook.*did you mean token_weights\?"):
        check_hook_names([NearMiss()])
    with pytest.raises(UserError, match=r"OldContract.on_advantages is no longer a hook: use loss_mask"):
        check_hook_names([OldContract()])
    check_hook_names([Fine()])  # real hooks, helpers and private methods pass
    assert {"shape_rewards", "loss_mask", "token_weights", "extra_loss_terms", "on_update_end"} <= set(TECHNIQUE_HOOKS)


def test_a_misspelt_hook_fails_the_fit_before_the_model_loads(tmp_path, monkeypatch):
    from lite_ppo import LitePPO

    def no_weights(self):
        raise AssertionError("configure_model ran: the check must come before the weights load")

    monkeypatch.setattr(LitePPO, "configure_model", no_weights)
    with pytest.raises(UserError, match="Misspelt.on_advantage"):
        fit_constructed(tmp_path, Misspelt())


# -- hooks written before StepContext ---------------------------------------------------------------------
class LegacyMaskRow(Technique):
    """``MaskRow`` with the hook signature before StepContext (trainer, module, batch, metrics)."""

    def __init__(self, row: int) -> None:
        self.row = row
        self.seen: list = []

    @override
    def loss_mask(self, trainer, module, batch, metrics):
        self.seen.append((trainer, module, metrics))
        keep = torch.ones_like(batch.loss_mask)
        keep[self.row] = 0
        metrics.mean(f"mask{self.row}/kept_rows", keep[:, 0].sum(), keep.shape[0])
        return keep

    @override
    def on_update_end(self, trainer, module, batch, stats):
        self.seen.append(("end", batch.num_responses, stats.policy_loss))


def test_hooks_with_the_old_signatures_are_adapted_and_named_once():
    from types import SimpleNamespace

    from helpers.technique_batches import make_batch, step_ctx
    from lite_ppo.technique import UpdateStats, adapt_legacy_hooks

    legacy, current = LegacyMaskRow(1), MaskRow(1)
    with pytest.warns(
        FutureWarning,
        match=r"^LegacyMaskRow: hook signatures before StepContext .*: write loss_mask\(self, ctx, batch\), "
        r"on_update_end\(self, ctx, batch, stats\);",
    ):
        adapt_legacy_hooks([legacy, current])
    batch, trainer, module = make_batch([1.0, 0.0, 1.0], [0, 0, 1], [2, 3, 1]), SimpleNamespace(), SimpleNamespace()
    ctx = step_ctx(trainer, module)
    assert torch.equal(legacy.loss_mask(ctx, batch), current.loss_mask(ctx, batch))
    legacy.on_update_end(ctx, batch, UpdateStats(policy_loss=0.25))
    # The adapter hands the old hook what it used to get: the trainer, the module and the step's metrics.
    assert legacy.seen == [(trainer, module, ctx.metrics), ("end", 3, 0.25)]
    assert ctx.metrics.compute(Ranks(None))["mask1/kept_rows"] == pytest.approx(2 / 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        adapt_legacy_hooks([MaskRow(0), Fine()])  # today's signatures: nothing to say


def test_a_hook_of_neither_signature_is_one_line():
    from lite_ppo.technique import adapt_legacy_hooks

    class TwoArguments(Technique):
        @override
        def shape_rewards(self, batch):
            return None

    with pytest.raises(
        UserError,
        match=r"^TwoArguments.shape_rewards takes 1 argument\(s\); write it as "
        r"shape_rewards\(self, ctx, batch\)",
    ):
        adapt_legacy_hooks([TwoArguments()])


def test_old_and_new_signatures_train_alike(tmp_path):
    """A fit with the old-signature technique gives the same step as with today's."""
    Seen.batches = []
    with pytest.warns(FutureWarning, match="LegacyMaskRow"):
        before, _ = fit_constructed(tmp_path / "before", LegacyMaskRow(2), Weight(0.5), Seen())
    now, _ = fit_constructed(tmp_path / "now", MaskRow(2), Weight(0.5), Seen())
    (mask_before, *_), (mask_now, *_) = Seen.batches
    untimed = [tag for tag in now if not tag.startswith("time/")]
    assert torch.equal(mask_before, mask_now) and len(untimed) > 20 and sorted(before) == sorted(now)
    assert {tag: before[tag] for tag in untimed} == {tag: now[tag] for tag in untimed}


# -- order-independent composition -----------------------------------------------------------------------
class MaskRow(Technique):
    """Removes row ``row`` from the loss; records the kept share in ``ctx.metrics``."""

    repeatable = True  # two of them, masking two rows, are the point of the composition test

    def __init__(self, row: int) -> None:
        self.row = row

    @override
    def loss_mask(self, ctx, batch):
        keep = torch.ones_like(batch.loss_mask)
        keep[self.row] = 0
        ctx.metrics.mean(f"mask{self.row}/kept_rows", keep[:, 0].sum(), keep.shape[0])
        return keep


class Weight(Technique):
    repeatable = True  # two weightings multiply: what the composition test checks

    def __init__(self, factor: float) -> None:
        self.factor = factor

    @override
    def token_weights(self, ctx, batch):
        assert batch.old_logprobs is not None  # called after the old log-probs
        return torch.full_like(batch.old_logprobs, self.factor)


class Seen(Technique):
    """Records the final batch the optimizer saw (read-only hook)."""

    batches: list = []

    @override
    def on_update_end(self, ctx, batch, stats):
        Seen.batches.append((batch.loss_mask.clone(), batch.token_weights.clone(), stats.policy_loss, stats.scalars))


def test_masks_and_weights_compose_in_any_callback_order(tmp_path):
    results = []
    for k, order in enumerate(itertools.permutations([MaskRow(0), MaskRow(2), Weight(0.5), Weight(3.0)])):
        if k % 6:  # 4 of the 24 orders are enough to see order dependence
            continue
        Seen.batches = []
        scalars, _ = fit_constructed(tmp_path / str(k), *order, Seen())
        results.append((Seen.batches[0], scalars))
    (mask, weights, loss, _), scalars = results[0]
    expected_mask = constructed_batch().response_mask.clone()
    expected_mask[[0, 2]] = 0
    assert torch.equal(mask, expected_mask)
    assert torch.allclose(weights, torch.full_like(weights, 1.5))
    assert scalars["mask0/kept_rows"] == pytest.approx(3 / 4) and scalars["mask2/kept_rows"] == pytest.approx(3 / 4)
    for (m, w, lo, _), s in results[1:]:
        assert torch.equal(m, mask) and torch.equal(w, weights) and lo == loss
        assert s["loss/policy"] == scalars["loss/policy"]


def test_the_rollout_batch_handed_to_the_module_is_not_edited(tmp_path):
    batch = constructed_batch()
    before = batch.loss_mask.clone()
    fit_constructed(tmp_path, MaskRow(1), Weight(2.0), batch=batch)
    assert torch.equal(batch.loss_mask, before) and batch.token_weights is None and batch.advantages is None


# -- the step's metrics ----------------------------------------------------------------------------------
def test_step_metrics_means_sums_and_extrema_by_hand():
    m = StepMetrics()
    m.mean("a", 3.0, 4)  # micro-batch 1: 3 over 4 tokens
    m.mean("a", 1.0, 1)  # micro-batch 2: 1 over 1 token -> 4 / 5, not the mean of 0.75 and 1
    m.sum("b", 2.0)
    m.sum("b", torch.tensor(0.5))
    m.max("c", 1.0)
    m.max("c", torch.tensor(4.0))
    m.min("d", 2.0)
    m.min("d", -1.0)
    m.mean("empty", 0.0, 0)
    m.max("never", float("-inf"))
    out = {k: float(v) for k, v in m.compute(Ranks(None)).items()}
    assert out == {"a": pytest.approx(0.8), "b": 2.5, "c": 4.0, "d": -1.0, "empty": 0.0}
    assert m.compute(Ranks(None)) == {}  # reset after compute


def test_ranks_on_one_process_are_identities():
    ranks = Ranks(None)
    x = torch.tensor([1.0, 2.0])
    assert ranks.world_size == 1 and torch.equal(ranks.sum(x), x) and torch.equal(ranks.cat(x), x)
    assert torch.equal(ranks.max(x), x) and ranks.any(True) and not ranks.any(False) and ranks.objects("o") == ["o"]


# -- the built-in callbacks keep the contract visibly ------------------------------------------------------
def _hooks_without_override(classes) -> list[str]:
    """Methods (and properties) of ``classes`` that redefine a base class's without ``@override``
    (``typing_extensions.override`` marks the function with ``__override__``)."""
    missing = []
    for cls in classes:
        for name, value in vars(cls).items():
            fn = value.fget if isinstance(value, property) else value
            if name.startswith("_") or not callable(fn):
                continue
            if any(name in vars(base) for base in cls.__mro__[1:] if base is not object):
                if not getattr(fn, "__override__", False):
                    missing.append(f"{cls.__name__}.{name}")
    return missing


def _builtin_callback_classes() -> list[type]:
    import importlib
    import inspect
    import pkgutil

    from lightning.pytorch import Callback

    import lite_ppo.callbacks as package

    classes = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"lite_ppo.callbacks.{info.name}")
        classes += [
            cls
            for _, cls in inspect.getmembers(module, inspect.isclass)
            if cls.__module__ == module.__name__ and issubclass(cls, Callback)
        ]
    return classes


def test_every_builtin_hook_is_marked_override():
    """CONTRIBUTING asks for ``@override`` on every hook: a renamed base hook then fails the type check
    instead of silently never running. Every callback shipped in lite_ppo.callbacks keeps it."""
    classes = _builtin_callback_classes()
    assert len(classes) >= 20  # every technique, the rollout, evaluation, diagnostics and console callbacks
    assert _hooks_without_override(classes) == []


def test_the_override_check_sees_a_missing_mark():
    class Unmarked(Technique):
        def loss_mask(self, ctx, batch):
            return None

    class Marked(Technique):
        @override
        def loss_mask(self, ctx, batch):
            return None

    assert _hooks_without_override([Unmarked, Marked]) == ["Unmarked.loss_mask"]


def test_on_phase_is_a_declared_hook_that_the_name_check_accepts():
    """The module calls ``on_phase`` on every callback that defines it; a technique may define it too."""

    class PhaseWatcher(Technique):
        @override
        def on_phase(self, trainer, module):
            return None

    assert "on_phase" in TECHNIQUE_HOOKS
    check_hook_names([PhaseWatcher()])


def test_the_hook_order_names_every_hook_once_with_its_arguments():
    """HOOK_ORDER (the one telling of the step order) lists each hook of Technique once, with the
    arguments its method takes."""
    import inspect

    from lite_ppo.technique import HOOK_ORDER

    assert sorted(h.name for h in HOOK_ORDER) == sorted(TECHNIQUE_HOOKS)
    for hook in HOOK_ORDER:
        params = [p for p in inspect.signature(getattr(Technique, hook.name)).parameters if p != "self"]
        assert hook.arguments == params, f"{hook.name}: the table says {hook.arguments}, the method takes {params}"


@pytest.mark.slow
def test_a_real_fit_calls_the_hooks_in_the_order_told(tmp_path):
    """Two rollout steps of the tiny model through `lite-ppo fit` (the Rollout callback and its HF engine,
    the module's six stages) with a technique that overrides every hook: the calls, repeats of a hook in a
    row merged (shape_rewards per generation round, extra_loss_terms per micro-batch), are the once-per-run
    hooks and then each step's hooks exactly in HOOK_ORDER's order; on_phase runs inside the steps."""
    import yaml

    from helpers.fits import tiny_fit_args
    from helpers.hook_recorder import HookRecorder
    from lite_ppo.cli.commands import main
    from lite_ppo.technique import HOOK_ORDER

    config = tmp_path / "recorder.yaml"
    callbacks = [
        {"remove": "lite_ppo.callbacks.AdvantageNormalization"},
        {"class_path": "helpers.hook_recorder.HookRecorder"},
    ]
    config.write_text(yaml.safe_dump({"trainer": {"callbacks": callbacks, "enable_progress_bar": False}}))
    HookRecorder.calls = []
    argv = tiny_fit_args(tmp_path, "--config", str(config), "--data.steps_per_epoch", "2")
    argv += ["--trainer.limit_val_batches", "0", "--model.model_path", "builtin:tiny"]
    main(argv)
    merged = [name for name, _ in itertools.groupby(HookRecorder.calls)]
    told = [h.name for h in HOOK_ORDER if h.name != "on_phase"]
    per_step = [h.name for h in HOOK_ORDER if not h.runs.startswith("once") and h.name != "on_phase"]
    without_phase = [name for name, _ in itertools.groupby(n for n in HookRecorder.calls if n != "on_phase")]
    assert without_phase == told + per_step  # the first step after the once-per-run hooks, then the second
    assert "on_phase" in merged[merged.index(per_step[0]) : len(merged) - merged[::-1].index(per_step[-1])]


def test_contributing_hook_table_is_the_generated_one():
    from helpers.paths import REPO
    from lite_ppo.technique import hook_table_markdown

    page = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    marker = "<!-- generated: python -m lite_ppo.technique -->\n"
    begin = page.index(marker) + len(marker)
    end = page.index("\n\n", begin) + 1
    assert page[begin:end] == hook_table_markdown(), "regenerate it: python -m lite_ppo.technique"


def _module_members_used(path) -> set[str]:
    """Every ``module.X`` / ``pl_module.X`` / ``ctx.module.X`` attribute a callback file reads or calls."""
    import ast

    def is_module(node) -> bool:
        if isinstance(node, ast.Name):
            return node.id in ("module", "pl_module")
        return isinstance(node, ast.Attribute) and node.attr == "module" and isinstance(node.value, ast.Name)

    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute) and is_module(node.value)}


def test_shipped_callbacks_use_only_the_declared_module_interface():
    """The techniques (and the other shipped callbacks) touch the module only through PolicyModule;
    they import nothing of lite_ppo.training.module."""
    from helpers.paths import REPO
    from lite_ppo.policy_module import MEMBERS

    for path in sorted((REPO / "callbacks").glob("*.py")):
        undeclared = _module_members_used(path) - MEMBERS
        assert not undeclared, f"{path.name} uses module members PolicyModule does not declare: {sorted(undeclared)}"
        assert "lite_ppo.training.module" not in path.read_text(encoding="utf-8"), path.name


def test_the_check_sees_an_undeclared_member(tmp_path):
    from lite_ppo.policy_module import MEMBERS

    source = tmp_path / "mine.py"
    source.write_text("def loss_mask(self, ctx, batch):\n    return ctx.module.loss_config, ctx.module.tokenizer\n")
    assert _module_members_used(source) - MEMBERS == {"loss_config"}
    source.write_text("def on_fit_start(self, trainer, pl_module):\n    return pl_module.policy\n")
    assert _module_members_used(source) - MEMBERS == {"policy"}


def test_lite_ppo_has_every_declared_member(tiny_model_path):
    from lite_ppo import LitePPO
    from lite_ppo.policy_module import MEMBERS, PolicyModule

    module = LitePPO(model_path=tiny_model_path)
    module.configure_model()
    assert isinstance(module, PolicyModule)
    assert not [name for name in sorted(MEMBERS) if not hasattr(module, name)]


def test_phase_listeners_are_declared():
    """``module.report_phase`` calls the callbacks that are a declared ``PhaseListener``: every technique and
    the console bar; a plain Lightning callback is not one."""
    from lightning.pytorch import Callback

    from lite_ppo.callbacks.console import ConsoleProgressBar
    from lite_ppo.policy_module import PhaseListener
    from lite_ppo.technique import Technique

    assert isinstance(ConsoleProgressBar(), PhaseListener) and isinstance(Technique(), PhaseListener)
    assert not isinstance(Callback(), PhaseListener)


def _sibling_lookups(path) -> list[int]:
    """Lines where a callback file reaches for the other callbacks: any read of ``<x>.callbacks`` (a search
    of ``trainer.callbacks``, or a listing of them), or a call of the helpers that search it
    (``techniques_of``, ``divergence_guard_of``). The module finds its techniques and guard once at setup;
    a callback gets them from ``ctx.techniques``."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "callbacks" and isinstance(node.ctx, ast.Load):
            lines.add(node.lineno)
        if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
            name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            if name in ("techniques_of", "divergence_guard_of"):
                lines.add(node.lineno)
    return sorted(lines)


def test_no_shipped_callback_looks_up_another():
    """Settings come from their owner through the module (``configure_run``), conflicts are declared on
    the technique (``conflicts_with``): no shipped callback searches ``trainer.callbacks`` for a sibling."""
    from helpers.paths import REPO

    found = {path.name: _sibling_lookups(path) for path in sorted((REPO / "callbacks").glob("*.py"))}
    assert not {name: lines for name, lines in found.items() if lines}


def test_the_sibling_check_sees_a_lookup(tmp_path):
    source = tmp_path / "mine.py"
    source.write_text(
        "def setup(self, trainer, pl_module, stage):\n"
        "    rollout = next(cb for cb in trainer.callbacks if isinstance(cb, Rollout))\n"
        "    for cb in trainer.callbacks:\n"
        "        if hasattr(cb, 'sampling'):\n"
        "            pass\n"
        "    names = [type(cb).__name__ for cb in trainer.callbacks]\n"
        "    mine = techniques_of(trainer), lite_ppo.reliability.divergence_guard_of(trainer)\n"
        "    ctx.techniques  # what a callback is given instead\n"
    )
    assert _sibling_lookups(source) == [2, 3, 6, 7]


def test_contributing_tells_the_stages_that_training_step_runs():
    """The numbered stages of ``LitePPO.training_step`` (its ``# N. Name`` comments) are the stages
    CONTRIBUTING's "One training step" lists, in order: a stage added, moved or renamed in the code
    fails here until the guide says so."""
    import inspect
    import re

    from helpers.paths import REPO
    from lite_ppo.training.module import LitePPO

    code = re.findall(r"^\s+# (\d)\. ([^:,.(\n]+?)\s*[:,.(]", inspect.getsource(LitePPO.training_step), re.M)
    guide = re.findall(r"^   (\d)\. \*\*([a-z -]+)\*\*", (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8"), re.M)
    assert len(code) == 6, code
    assert [(n, name.lower()) for n, name in code] == guide
