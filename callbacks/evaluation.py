"""Benchmark evaluation during training: Lightning validation on MATH-500, AIME, ... with metrics per benchmark."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from typing_extensions import override

from lite_ppo.errors import UserError
from lite_ppo.evaluation.benchmarks import apply_limit, load_benchmark_config, load_benchmarks, resolve_data_dir
from lite_ppo.evaluation.metrics import flatten
from lite_ppo.evaluation.report import comparison_table, table_columns, text_table, write_jsonl, write_report
from lite_ppo.evaluation.results import GroupMetrics, problem_results, response_records
from lite_ppo.policy_module import STEP_OUTPUT_KEY, rollout_of
from lite_ppo.reliability.checkpoint_io import atomic_write_bytes
from lite_ppo.rollout.settings import RunSettings
from lite_ppo.strategies.ranks import Ranks

HELDOUT_DIR = "heldout"  # <run folder>/heldout/step_<step>.json: per-problem held-out results


class Evaluation(Callback):
    """Adds benchmark problems to Lightning's validation and reports metrics per benchmark.

    Validation runs when Lightning schedules it (``trainer.val_check_interval``,
    ``trainer.check_val_every_n_epoch``; ``lite-ppo validate`` runs it once). In ``setup`` the
    callback gives the benchmarks to the data module (``MathDataModule.configure_validation``),
    whose validation loader then serves them after its own per-tier held-out split
    (``data.val_size``, kept unless ``tier_split: false``). The ``Rollout``
    callback generates and scores each batch with its ``eval_sampling`` (greedy by default; set
    ``n > 1`` and a temperature for mean@n and pass@k) and the same reward as training; this
    callback turns the scored responses into metrics (``lite_ppo.evaluation.metrics``, summed over
    ranks) and at the end of the validation epoch:

    - logs ``eval/<benchmark>/<metric>``, ``eval/average/<metric>`` (unweighted mean over the
      averaged benchmarks: the paper's average) and ``eval/weighted_average/<metric>``
      (problem-weighted), and ``val/<tier>/<metric>`` for the held-out tiers; metrics are
      ``accuracy``, ``mean@n``, ``pass@k`` and ``maj@k`` (n > 1), ``response_length``, ``truncation_rate``,
      ``unparsed_rate``;
    - prints a benchmark x metric table (rank 0);
    - optionally writes ``metrics.json``, ``metrics.md`` and ``responses.rank<r>.jsonl`` under
      ``output_dir/step_<global_step>``;
    - writes the held-out tiers' per-problem results to ``<run folder>/heldout/step_<step>.json``
      (rank 0, gathered over ranks; the run folder is the logger's ``log_dir``, none without a
      logger): ``{"step": int, "problems": [{"id": str, "tier": str, "correct": bool}, ...]}``
      sorted by ``(tier, id)``, ``step`` being the step the ``val/<tier>/*`` scalars are logged at
      (0: before training), ``correct`` the verifier's verdict on the greedy response, the rule of
      ``accuracy`` (so each tier's share of ``correct`` is its ``val/<tier>/accuracy``). Written
      only for one sample per problem (``eval_sampling.n == 1``, the default).

    With ``evaluate_before_training: true`` the sanity check runs the whole validation before the
    first step: it needs ``Trainer(num_sanity_val_steps=-1)``, which ``lite-ppo fit`` sets when this
    option is on (a Python user passes it; ``setup`` says so otherwise). The callback keeps those
    numbers (Lightning discards sanity-check logs), logs them at step 0 and, when fit ends, prints
    accuracy before and after training (after = the last validation run).

    Args:
        benchmarks: a benchmark YAML (``configs/eval/benchmarks.yaml``), comma-separated dataset
            names (``"math500,aime24"``; ``"paper"`` = the paper's six), a list of
            ``{name, file, title?, limit?, in_average?}`` / dataset names, or None for the built-in
            list of seven. Named sets come from the package (MATH-500, GSM8K) or the user cache
            (``lite-ppo data fetch NAME``; fetched on first use where the Hub is reachable).
        data_dir: folder of benchmark files named like the registry's (``aime24.jsonl``); wins
            over the shipped and cached copies (else the YAML's ``data_dir``, else
            ``$LITE_PPO_EVAL_DIR``).
        limit: evaluate only the first ``limit`` problems of each benchmark (on top of per-benchmark limits).
        batch_size: problems per validation batch (global; split across ranks).
        pass_k: the k of pass@k (default: powers of two up to n, and n).
        tier_split: keep the data module's per-tier held-out split in validation and report it
            under ``val/<tier>/``.
        evaluate_before_training: evaluate everything before the first training step (see above).
        print_table: print the table after each validation run (rank 0).
        output_dir: where to write per-validation reports (None: nowhere).
        prefix, tier_prefix: metric name prefixes.

    Example::

        trainer:
          val_check_interval: 50          # every 50 rollout steps
          callbacks:
            - class_path: lite_ppo.callbacks.Evaluation
              init_args:
                benchmarks: paper             # or configs/eval/benchmarks.yaml, "math500,gsm8k", ...
                limit: 100
                evaluate_before_training: true
        rollout:
          eval_sampling: {n: 1, greedy: true, max_new_tokens: 4096}
    """

    def __init__(
        self,
        benchmarks: str | list[Any] | None = None,
        data_dir: str | None = None,
        limit: int | None = None,
        batch_size: int = 32,
        pass_k: list[int] | None = None,
        tier_split: bool = True,
        evaluate_before_training: bool = False,
        print_table: bool = True,
        output_dir: str | None = None,
        prefix: str = "eval",
        tier_prefix: str = "val",
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"Evaluation.batch_size must be >= 1, got {batch_size}")
        specs, configured_dir = load_benchmark_config(benchmarks)
        self.specs = apply_limit(specs, limit)
        self.data_dir = data_dir or configured_dir
        self.batch_size = batch_size
        self.pass_k = pass_k
        self.tier_split = tier_split
        self.evaluate_before_training = evaluate_before_training
        self.print_table = print_table
        self.output_dir = output_dir
        self.prefix, self.tier_prefix = prefix, tier_prefix
        self.titles = {s.name: s.display for s in self.specs}

        self.benchmarks: list | None = None  # (spec, problems) once loaded
        self.metrics: GroupMetrics | None = None
        self.tier_metrics: GroupMetrics | None = None
        self._tiers: list[str] = []  # the data module's held-out tiers, read at setup
        self.before: dict[str, Any] | None = None  # results of the pre-training (sanity) evaluation
        self.history: list[dict[str, Any]] = []  # {"step", "results", "tiers"} of every full validation
        self._batches_seen = 0
        self._records: list[dict[str, Any]] = []
        self._heldout: list[dict[str, Any]] = []  # {"id", "tier", "correct"} of this rank's held-out problems

    # ------------------------------------------------------------------ setup
    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        # The logged values are torchmetrics states already summed over ranks (sync_dist=False on
        # purpose); Lightning still suggests sync_dist whenever a process group exists, which vLLM
        # creates even in a one-process run. Silence that suggestion for these names only.
        names = "|".join(re.escape(p) for p in (self.prefix, self.tier_prefix))
        warnings.filterwarnings("ignore", message=rf"It is recommended to use `self.log\('({names})/")
        if self.benchmarks is None:
            # Read every file now, so a missing or malformed one fails before any training.
            # No benchmarks (only the held-out training tiers): no data folder is needed.
            self.benchmarks = load_benchmarks(self.specs, resolve_data_dir(None, self.data_dir)) if self.specs else []
        if (
            stage == "fit"
            and self.evaluate_before_training
            and trainer.num_sanity_val_steps != float("inf")
            and not trainer.fast_dev_run
        ):
            raise UserError(
                "Evaluation(evaluate_before_training=True) evaluates in the sanity check before training: it needs "
                f"Trainer(num_sanity_val_steps=-1) (all batches), got {trainer.num_sanity_val_steps} "
                "(lite-ppo fit sets it)"
            )
        datamodule = trainer.datamodule
        if not callable(getattr(datamodule, "configure_validation", None)):
            raise ValueError(
                "Evaluation gives its benchmarks to the data module's validation loader: "
                "the trainer needs a data module "
                "with configure_validation(problem_sets, batch_size, held_out), such as lite_ppo.data.MathDataModule"
            )
        datamodule.configure_validation(
            [(spec.name, problems) for spec, problems in self.benchmarks], self.batch_size, held_out=self.tier_split
        )
        # Every rank must know every tier (metrics sync tier by tier): ask the data module.
        self._tiers = list(dict.fromkeys(p.tier for p in datamodule.held_out())) if self.tier_split else []

    def configure_run(self, settings: RunSettings) -> None:
        """The metrics, sized by ``rollout.eval_sampling.n`` (handed over by the module after setup)."""
        n = settings.eval_sampling.n
        if self.pass_k and max(self.pass_k) > n:
            raise UserError(
                f"Evaluation.pass_k={self.pass_k} needs rollout.eval_sampling.n >= {max(self.pass_k)} "
                f"samples per problem, got n={n}"
            )
        self.metrics = GroupMetrics(
            [s.name for s, _ in self.benchmarks],
            num_samples=n,
            ks=self.pass_k,
            averaged=[s.name for s, _ in self.benchmarks if s.in_average],
        )
        self.tier_metrics = GroupMetrics([], num_samples=n, ks=self.pass_k)
        for tier in self._tiers:
            self.tier_metrics.add_group(tier)

    # ------------------------------------------------------------------ validation
    @override
    def on_validation_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.metrics is None:
            raise UserError(
                "Evaluation needs the rollout settings (rollout.eval_sampling): add lite_ppo.callbacks.Rollout "
                "under trainer.callbacks"
            )
        device = trainer.strategy.root_device
        for metrics in (self.metrics, self.tier_metrics):
            metrics.reset()
            metrics.to(device)
        self._batches_seen = 0
        self._records = []
        self._heldout = []

    @override
    def on_validation_batch_end(
        self, trainer, pl_module, outputs, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        rollout = rollout_of(outputs)  # LitePPO.validation_step's
        if rollout is None:  # another module: no metrics would come of it, and nothing would say so
            raise UserError(
                f"Evaluation reads the scored responses that LitePPO.validation_step returns "
                f"({{{STEP_OUTPUT_KEY!r}: ...}}); "
                f"{type(pl_module).__name__}.validation_step returned {type(outputs).__name__}"
            )
        self._batches_seen += 1
        problems = batch["problems"]
        if "benchmark" in batch:
            groups = [(batch["benchmark"], self.metrics, batch.get("valid"))]
        else:  # the data module's held-out tiers, possibly several in one batch
            groups = [
                (tier, self.tier_metrics, [p.tier == tier for p in problems])
                for tier in dict.fromkeys(p.tier for p in problems)
            ]
        for group, metrics, valid in groups:
            if group not in metrics.metrics:
                metrics.add_group(group)
            metrics.update_rollout(group, problems, rollout, valid)
            if self.output_dir is not None:
                self._records.extend(response_records(group, problems, rollout, valid=valid))
        if "benchmark" not in batch and self.tier_metrics.num_samples == 1:
            self._heldout.extend(problem_results(problems, rollout))

    @override
    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        results = self.metrics.compute()
        tiers = self.tier_metrics.compute() if self.tier_metrics.groups else None
        complete = self._batches_seen >= _num_batches(trainer.val_dataloaders)
        if trainer.sanity_checking and not complete:
            return  # a partial sanity check (num_sanity_val_steps > 0): nothing to report
        flat = self._flat(results, tiers)
        fitting = trainer.state.fn == "fit"
        # The x-axis of evaluation scalars while fitting: training steps done (0 = before training),
        # i.e. the number of updates the evaluated policy has had. Training scalars of step k
        # (0-based) describe rollouts of the policy after k updates, so the two line up.
        step = _steps_done(trainer) if fitting else trainer.global_step
        if fitting:
            if not trainer.sanity_checking:
                # callback_metrics (ModelCheckpoint monitor, EarlyStopping); the logger gets them below.
                pl_module.log_dict(flat, on_step=False, on_epoch=True, sync_dist=False, logger=False)
            # Lightning drops sanity-check logs, and would put this run at the last step's index.
            for logger in trainer.loggers:
                logger.log_metrics(flat, step=step)
        else:
            pl_module.log_dict(flat, on_step=False, on_epoch=True, sync_dist=False)
        entry = {
            "step": step,
            "global_step": trainer.global_step,
            "results": results,
            "tiers": tiers,
            "complete": complete,
        }
        if trainer.sanity_checking:
            self.before = entry
        else:
            self.history.append(entry)
        if tiers is not None and self.tier_metrics.num_samples == 1:
            self._write_heldout(trainer, step)
        self._report(trainer, step, results, tiers, fitting)

    def _write_heldout(self, trainer: Trainer, step: int) -> None:
        """``<log_dir>/heldout/step_<step>.json``: every rank's held-out results, written by rank 0."""
        gathered = [row for rows in Ranks(trainer).objects(self._heldout) for row in rows]  # every rank calls
        log_dir = trainer.log_dir if trainer.loggers else None  # every rank asks (it broadcasts rank 0's)
        if log_dir is None or not trainer.is_global_zero:
            return
        rows = sorted(gathered, key=lambda row: (row["tier"], row["id"]))
        path = Path(log_dir) / HELDOUT_DIR / f"step_{step}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, json.dumps({"step": int(step), "problems": rows}).encode())

    def _report(self, trainer: Trainer, step: int, results: dict, tiers: dict | None, fitting: bool) -> None:
        """Print this evaluation's tables (rank 0) and write its report and responses (``output_dir``)."""
        when = (
            "before training"
            if trainer.sanity_checking
            else (f"after {step} training steps" if fitting else f"global step {step}")
        )
        if self.print_table and trainer.is_global_zero:
            if results["groups"]:
                print("\n" + text_table(results, self.titles, title=f"Evaluation ({when})"), flush=True)
            if tiers is not None:
                print("\n" + text_table(tiers, title=f"Held-out tiers ({when})"), flush=True)
        if self.output_dir is not None:
            folder = Path(self.output_dir) / f"step_{step}"
            if trainer.is_global_zero:
                write_report(
                    folder,
                    results,
                    self.titles,
                    {
                        "step": step,
                        "global_step": trainer.global_step,
                        "before_training": trainer.sanity_checking,
                        "tiers": tiers,
                    },
                )
            write_jsonl(folder / f"responses.rank{trainer.global_rank}.jsonl", self._records)

    @override
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.is_global_zero or not self.print_table:
            return
        after = self.history[-1] if self.history else None
        if after is None:
            if self.before is not None:
                print("\nNo validation ran after training started; accuracy before training:", flush=True)
                for label, results in (("benchmark", self.before["results"]), ("tier", self.before["tiers"])):
                    if results and results["groups"]:
                        print(text_table(results, self.titles if label == "benchmark" else None), flush=True)
            return
        if self.before is None:  # nothing to compare with: the after-training table was printed already
            return
        before = self.before
        print(f"\nAccuracy before training and after {after['step']} training steps:", flush=True)
        for label, name in (("benchmark", "results"), ("held-out tier", "tiers")):
            if after[name] and after[name]["groups"]:
                titles = self.titles if name == "results" else None
                print(comparison_table(before[name] or {"groups": {}}, after[name], titles, label=label), flush=True)

    # ------------------------------------------------------------------ helpers
    def _flat(self, results: dict[str, Any], tiers: dict[str, Any] | None) -> dict[str, float]:
        groups = {**results["groups"]}
        for key in ("average", "weighted_average"):
            if results.get(key):
                groups[key] = results[key]
        flat = flatten(self.prefix, {g: _logged(m) for g, m in groups.items()})
        if tiers is not None:
            flat.update(flatten(self.tier_prefix, {g: _logged(m) for g, m in tiers["groups"].items()}))
        return flat

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"before": self.before, "history": self.history}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.before = state_dict.get("before")
        self.history = list(state_dict.get("history", []))


def _num_batches(loaders: Any) -> int:
    """Batches in a validation run's loader(s) (what a complete run goes through)."""
    return sum(
        len(loader) for loader in (loaders if isinstance(loaders, (list, tuple)) else [loaders]) if loader is not None
    )


def _steps_done(trainer) -> int:
    """Training steps (rollout batches) completed; validation inside the training loop runs
    before Lightning counts the batch that just trained."""
    if trainer.sanity_checking:
        return 0
    return trainer.fit_loop.epoch_loop._batches_that_stepped + 1


def _logged(metrics: dict[str, float]) -> dict[str, float]:
    """The metrics that go to the logger (the table's columns; status shares stay in reports)."""
    return {k: metrics[k] for k in table_columns(metrics)}
