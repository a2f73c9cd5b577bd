"""The console: a progress bar that says what the step is doing, with the key live metrics, and one
compact summary line per step."""

from __future__ import annotations

import logging
import math
import threading
import warnings
from typing import Any

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import ModelSummary
from lightning.pytorch.callbacks.progress.rich_progress import (
    BatchesProcessedColumn,
    CustomBarColumn,
    CustomTimeColumn,
    RichProgressBar,
    RichProgressBarTheme,
)
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.model_summary import get_human_readable_count
from rich.progress import ProgressColumn, TextColumn
from rich.table import Column
from rich.text import Text
from typing_extensions import override

from lite_ppo import metric_names as names
from lite_ppo.training.schedule import planned_rollout_steps

# Tag -> the short label it has in the bar and in the summary line.
LIVE_METRICS: dict[str, str] = {
    names.REWARD_ACCURACY: "acc",
    names.RESPONSE_LENGTH: "len",
    names.APPROX_KL: "kl",
    names.CLIP_FRACTION: "clip",
    names.STEP_SECONDS: "s/step",
}
# Objectives other than the PPO clip log no clip/fraction; their own figure takes its place (label, tag).
STANDS_IN: dict[str, tuple[tuple[str, str], ...]] = {
    names.CLIP_FRACTION: (
        ("clip", names.GSPO_CLIP_FRACTION),  # GSPO: responses whose sequence ratio was clipped
        ("clip", names.CISPO_CLIPPED_FRACTION),  # CISPO: tokens whose IS weight was clipped
        ("gate+", names.SAPO_GRAD_SCALE_POSITIVE),  # SAPO: the share of the A>0 gradient its gate keeps
    ),
}
LIVE_STAND_INS: dict[str, str] = {tag: label for alts in STANDS_IN.values() for label, tag in alts}
# Start-up lines from Lightning that say nothing a user can act on (by the start of the message).
STARTUP_NOISE = (
    "\N{ELECTRIC LIGHT BULB} Tip:",  # the litlogger advertisement
    "GPU available: False",
    "TPU available: False",
    "Loading `train_dataloader` to estimate number of stepping batches",
    "Trainer already configured with model summary callbacks",  # PolicySummary replaces the table
)
BAR_WIDTH = 20  # characters of the bar itself, so that the phase, counts, clock and metrics fit one line


class ConsoleProgressBar(RichProgressBar):
    """Lightning's rich progress bar, made for RL steps that take minutes.

    - The bar's description names the phase of the running step: ``generating``, ``scoring``,
      ``syncing weights``, ``old log-probs``, ``updating 2/4`` (the module's ``report_phase``; the
      bar implements the ``on_phase`` callback it calls), so a long generation is not mistaken for
      a hang. Validation bars (``Validating before training`` for ``evaluate_before_training``, and
      ``Validation``) show from their first phase, at ``0/N``, not only once a batch is done.
    - The key live metrics next to it, with short labels: ``acc`` (``reward/accuracy``), ``len``
      (``response/length_mean``), ``kl`` (``policy/approx_kl``), ``clip`` (``clip/fraction``),
      ``s/step`` (``time/step_s``); Lightning's ``v_num`` is dropped. Under GSPO and CISPO ``clip`` is
      their own clip share (``gspo/clip_fraction``, ``cispo/clipped_fraction``), under SAPO ``gate+``
      (``sapo/grad_scale_of_positive``).
    - Every ``summary_every_n_steps`` training steps one plain line, as TRL and verl print, e.g.
      ``step 3/6 | acc 0.41 | len 23.1 | kl 0.002 | clip 0.01 | 12.3 s``. In a terminal it sits above
      the live bar; redirected to a file, the bar draws only its final state and the file gets
      these lines.
    - One line that fits the terminal: the description says ``Training`` (``Epoch k/N`` only when
      there are several epochs), Lightning's ``it/s`` column is gone (``s/step`` is among the
      metrics), the bar is short and the metrics are cut with ``…`` rather than wrapped.
    - The clock ticks once a second inside a phase (Lightning's bar redraws only when something
      changes, so a minute of generating read ``0:00:00``).
    - Transformers' weight-loading bars are turned off; Lightning's pytree deprecation notice, its
      "Tip: try installing litlogger" advertisement and the start-up lines in :data:`STARTUP_NOISE`
      (nothing a user can act on) are filtered.

    ``lite-ppo`` adds it under the ``console:`` section; ``--trainer.enable_progress_bar false``
    removes it (bar and lines), ``--console.refresh_rate 0`` hides the bar but keeps the lines,
    ``--console.summary_every_n_steps 0`` keeps the bar without lines.

    Args:
        summary_every_n_steps: print the summary line every this many training steps (0: never).
        summary_metrics: label -> tag of the values in the summary line, in order (default: the
            live metrics above, the step seconds last as ``12.3 s``).
        refresh_rate: redraws per second (0 hides the bar).
        leave: keep the finished bar of each epoch on screen.

    Example::

        console:
          summary_every_n_steps: 10
          summary_metrics: {acc: reward/accuracy, len: response/length_mean, mixed: groups/mixed}
    """

    def __init__(
        self,
        summary_every_n_steps: int = 1,
        summary_metrics: dict[str, str] | None = None,
        refresh_rate: int = 10,
        leave: bool = True,
    ) -> None:
        if summary_every_n_steps < 0:
            raise ValueError(f"ConsoleProgressBar.summary_every_n_steps must be >= 0, got {summary_every_n_steps}")
        super().__init__(refresh_rate=refresh_rate, leave=leave, theme=RichProgressBarTheme(metrics_format=".3g"))
        self.summary_every_n_steps = summary_every_n_steps
        self.summary_metrics = (
            dict(summary_metrics)
            if summary_metrics is not None
            else {label: tag for tag, label in LIVE_METRICS.items()}
        )
        self.summary_lines: list[str] = []  # what was printed (tests and notebooks read it)
        self._ticker: _Ticker | None = None
        # Now, not in setup(): Lightning prints its tip while the Trainer is built, after this bar.
        _quiet_startup_noise()

    # -- quiet libraries -----------------------------------------------------------------------------
    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        # Lightning's own use of a deprecated torch pytree API: nothing a user can act on.
        warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated.*")
        try:  # the "Loading weights" bars of every from_pretrained: noise next to ours
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
        except ImportError:  # pragma: no cover - transformers is a dependency
            pass

    # -- one line that fits, a clock that ticks ------------------------------------------------------
    @override
    def configure_columns(self, trainer: Trainer) -> list:
        # Lightning's columns less its it/s (a step takes seconds: s/step is among the metrics), kept
        # whole (no_wrap): when the line is too long only the metrics, the widest column, give way.
        columns = [
            TextColumn("[progress.description]{task.description}"),
            CustomBarColumn(
                bar_width=BAR_WIDTH,
                complete_style=self.theme.progress_bar,
                finished_style=self.theme.progress_bar_finished,
                pulse_style=self.theme.progress_bar_pulse,
            ),
            BatchesProcessedColumn(style=self.theme.batch_progress),
            CustomTimeColumn(style=self.theme.time),
        ]
        for column in columns:
            column._table_column = Column(no_wrap=True)
        return columns

    @override
    def _init_progress(self, trainer: Trainer) -> None:
        super()._init_progress(trainer)
        if self.progress is None:
            return
        # The metrics take what is left of the line and end in "…" instead of wrapping onto more lines.
        *others, metrics = self.progress.columns
        if not isinstance(metrics, _OneLine):
            self.progress.columns = (*others, _OneLine(metrics))
        if self._ticker is None or not self._ticker.is_alive():
            self._ticker = _Ticker(self)
            self._ticker.start()

    @override
    def _stop_progress(self) -> None:
        self._stop_ticker()
        super()._stop_progress()

    @override
    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._stop_ticker()
        super().teardown(trainer, pl_module, stage)

    def _stop_ticker(self) -> None:
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None

    @override
    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_ticker"] = None  # a thread does not pickle (spawned processes start their own)
        return state

    @override
    def _get_train_description(self, current_epoch: int) -> str:
        max_epochs = self.trainer.max_epochs
        if max_epochs is not None and max_epochs > 1:
            return super()._get_train_description(current_epoch)
        # One epoch (every shipped config): "Epoch 0/0" says nothing; the counts say which step.
        return f"{'Training':{len(self.validation_description)}}"

    # -- phases ----------------------------------------------------------------------------------------
    @property
    @override
    def sanity_check_description(self) -> str:
        # lite-ppo's sanity pass is the whole held-out validation (Evaluation.evaluate_before_training).
        return "Validating before training"

    def on_phase(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Called by the module's ``report_phase``: show the phase in the running bar's description.
        Lightning adds validation bars hidden until their first batch is done; a validation of one
        large batch (the held-out problems before training) would show nothing for minutes."""
        if self.progress is None or not self.is_enabled:
            return
        task_id, base = self._running_task(trainer)
        if task_id is None:
            return
        description = f"{base}{phase_text(getattr(pl_module, 'phase', None))}"
        self.progress.update(task_id, description=description, visible=True)
        self.refresh()

    def _running_task(self, trainer) -> tuple[Any, str]:
        if trainer.training and self.train_progress_bar_id is not None:
            return self.train_progress_bar_id, self._get_train_description(trainer.current_epoch).rstrip() + " "
        if trainer.sanity_checking and self.val_sanity_progress_bar_id is not None:
            return self.val_sanity_progress_bar_id, self.sanity_check_description + " "
        if trainer.validating and self.val_progress_bar_id is not None:
            return self.val_progress_bar_id, self.validation_description + " "
        return None, ""

    @override
    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs, batch, batch_idx: int) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        step = trainer.fit_loop.total_batch_idx + 1
        if self.summary_every_n_steps and step % self.summary_every_n_steps == 0 and trainer.is_global_zero:
            self.print_summary(self.summary_line(trainer, step))

    # -- live metrics and the summary line -------------------------------------------------------------
    @override
    def get_metrics(self, trainer: Trainer, pl_module: LightningModule) -> dict[str, Any]:
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        return {LIVE_METRICS.get(k) or LIVE_STAND_INS.get(k, k): v for k, v in items.items()}

    def summary_line(self, trainer: Trainer, step: int) -> str:
        """``step k/N | label value | ... | 12.3 s`` from the metrics logged this step."""
        total = _planned_steps(trainer)
        parts = [f"step {step}/{total}" if total else f"step {step}"]
        metrics = trainer.callback_metrics
        for label, tag in self.summary_metrics.items():
            if tag not in metrics:
                label, tag = next(((lb, t) for lb, t in STANDS_IN.get(tag, ()) if t in metrics), (label, tag))
            if tag not in metrics:
                continue
            value = float(metrics[tag])
            parts.append(f"{value:.1f} s" if tag == names.STEP_SECONDS else f"{label} {_short(value)}")
        return " | ".join(parts)

    def print_summary(self, line: str) -> None:
        self.summary_lines.append(line)
        if self.progress is not None and self._console is not None:
            self._console.print(line, markup=False, highlight=False, soft_wrap=True)  # above the live bar
        else:
            print(line, flush=True)


class PolicySummary(ModelSummary):
    """Lightning's model summary as one line (its table's FLOPs read 0 for a policy that is never
    traced), e.g. ``model: policy LlamaForCausalLM, 532 K parameters, 532 K trainable (2.1 MB)``.

    ``lite-ppo`` adds it in place of Lightning's table; ``--trainer.enable_model_summary false``
    removes it.
    """

    @override
    @staticmethod
    def summarize(
        summary_data: list[tuple[str, list[str]]],
        total_parameters: int,
        trainable_parameters: int,
        model_size: float,
        total_training_modes: dict[str, int],
        total_flops: int,
        **summarize_kwargs: Any,
    ) -> None:
        rank_zero_info(summary_line(summary_data, total_parameters, trainable_parameters, model_size))


def summary_line(
    summary_data: list[tuple[str, list[str]]], total_parameters: int, trainable_parameters: int, model_size: float
) -> str:
    """``model: policy LlamaForCausalLM, 532 K parameters, 532 K trainable (2.1 MB)``."""
    columns = dict(summary_data)
    modules = ", ".join(f"{name} {kind}" for name, kind in zip(columns.get("Name", []), columns.get("Type", [])))

    def count(n: int) -> str:
        return " ".join(get_human_readable_count(int(n)).split())  # "532 K", without Lightning's padding

    return (
        f"model: {modules or 'no modules'}, {count(total_parameters)} parameters, "
        f"{count(trainable_parameters)} trainable ({model_size:.1f} MB)"
    )


class _OneLine(ProgressColumn):
    """Lightning's metrics column drawn on one line: cut with "…" where the terminal ends."""

    def __init__(self, metrics: ProgressColumn) -> None:
        super().__init__()  # a wrapable column: the table narrows it first when the line is too long
        self.metrics = metrics

    def render(self, task: Any) -> Any:
        text = self.metrics(task)
        if isinstance(text, Text):
            text = text.copy()
            text.no_wrap, text.overflow = True, "ellipsis"
        return text


class _Ticker(threading.Thread):
    """Asks the bar's own refresh thread for a redraw once a second, so the clock moves in a phase."""

    def __init__(self, bar: ConsoleProgressBar, interval: float = 1.0) -> None:
        super().__init__(name="lite-ppo-console-clock", daemon=True)
        self.bar, self.interval, self.done = bar, interval, threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.interval):
            progress = self.bar.progress
            if progress is not None:
                progress.soft_refresh()  # a flag Lightning's refresh thread reads; draws under its lock

    def stop(self) -> None:
        self.done.set()


class _StartupNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(STARTUP_NOISE)


def _quiet_startup_noise() -> None:
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(f, _StartupNoise) for f in logger.filters):
        logger.addFilter(_StartupNoise())


def phase_text(phase: tuple[str, int, int] | None) -> str:
    """``"updating 2/4"``, ``"generating"``; empty when no step is running."""
    if not phase or phase[0] is None:
        return ""
    name, done, total = phase
    return f"{name} {done}/{total}" if total else name


def _short(value: float) -> str:
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.1f}" if abs(value) < 1000 else f"{value:.0f}"


def _planned_steps(trainer) -> int | None:
    """Training steps (rollout batches) the fit will run, when known: the epochs' batches, or fewer when
    ``trainer.max_steps`` (optimizer steps) ends the fit first."""
    module = getattr(trainer, "lightning_module", None)
    num_mini_batches = getattr(getattr(module, "hparams", None), "get", lambda *_: 1)("num_mini_batches", 1)
    return planned_rollout_steps(trainer, int(num_mini_batches or 1))
