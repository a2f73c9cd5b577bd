"""TechniqueAdvisor: the ``lite-ppo advise`` findings, live, as text in TensorBoard."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only
from typing_extensions import override

from lite_ppo.research.context import RunContext, context_from_config
from lite_ppo.research.rules import RULE_TAGS, Finding, advise, format_findings
from lite_ppo.research.run_folder import RunDir
from lite_ppo.research.scalars import Series

__all__ = ["TechniqueAdvisor"]


class TechniqueAdvisor(Callback):
    """Every ``every_n_steps`` training steps (and at the end of training) applies the technique
    advisor's rules (:mod:`lite_ppo.research.rules`: the practical reading of Liu et al., "Tricks or
    Traps? A Deep Dive into RL for LLM Reasoning", arXiv 2508.08221) to the diagnostics logged so far
    and writes the ranked findings as text to TensorBoard (tag ``advisor/findings``, TEXT tab) with
    the TensorBoard logger's ``experiment.add_text``. It changes nothing in training.

    The series are the values the run logged each step (``trainer.callback_metrics`` of the tags the
    rules read); the configuration is the run's saved ``config.yaml`` (written by the CLI beside the
    event files), or, without one, the class names and settings of the trainer's callbacks. Reading
    the same rules, ``lite-ppo advise RUN`` gives the same findings after the fact.

    Args:
        every_n_steps: how often to re-evaluate (training steps = rollout batches).
        model_kind: ``base`` or ``aligned`` to override the reading of the config
            (see :mod:`lite_ppo.research.context`).
        print_findings: also print the findings to the console at the end of training.

    Example::

        trainer:
          callbacks:
            - class_path: lite_ppo.callbacks.TechniqueAdvisor
              init_args: {every_n_steps: 20}
    """

    TAG = "advisor/findings"

    def __init__(
        self, every_n_steps: int = 50, model_kind: Literal["base", "aligned"] | None = None, print_findings: bool = True
    ) -> None:
        if every_n_steps < 1:
            raise ValueError(f"TechniqueAdvisor.every_n_steps must be >= 1, got {every_n_steps}")
        self.every_n_steps = every_n_steps
        self.model_kind = model_kind
        self.print_findings = print_findings
        self.history: dict[str, list[tuple[int, float]]] = {tag: [] for tag in RULE_TAGS}
        self.steps = 0
        self.last_findings: list[Finding] = []

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        metrics = trainer.callback_metrics
        for tag in RULE_TAGS:
            if tag in metrics:
                self.history[tag].append((self.steps, float(metrics[tag])))
        self.steps += 1
        if self.steps % self.every_n_steps == 0:
            self._report(trainer, pl_module, final=False)

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # When the last periodic report already holds the final state, only print it.
        self._report(trainer, pl_module, final=True, write=self.steps % self.every_n_steps != 0)

    def findings(self, trainer: Trainer, pl_module: LightningModule) -> tuple[list[Finding], RunContext]:
        table = {tag: Series.from_pairs(pairs) for tag, pairs in self.history.items() if pairs}
        ctx = self._context(trainer, pl_module)
        return advise(table, ctx), ctx

    @rank_zero_only
    def _report(self, trainer: Trainer, pl_module: LightningModule, final: bool, write: bool = True) -> None:
        findings, ctx = self.findings(trainer, pl_module)
        self.last_findings = findings
        text = format_findings(findings, ctx, self.steps)
        for logger in trainer.loggers if write else []:
            if isinstance(logger, TensorBoardLogger):
                # TensorBoard renders text as Markdown: a code block keeps the YAML indentation.
                logger.experiment.add_text(self.TAG, "```\n" + text + "\n```", global_step=self.steps)
        if final and self.print_findings:
            rank_zero_info(f"Technique advisor after {self.steps} steps:\n{text}")

    def _context(self, trainer: Trainer, pl_module: LightningModule) -> RunContext:
        log_dir = trainer.log_dir
        saved = RunDir(Path(log_dir)).config if log_dir else None  # the config.yaml LightningCLI saved
        if saved is not None:
            return context_from_config(saved, self.model_kind)
        # No saved config (a Trainer built in Python): describe the run's techniques the same way.
        techniques = pl_module.step_context().techniques
        callbacks = [{"class_path": type(t).__name__, "init_args": dict(vars(t))} for t in techniques]
        live = {"trainer": {"callbacks": callbacks}, "model": {"model_path": getattr(pl_module, "model_path", None)}}
        return context_from_config(live, self.model_kind)
