"""LightningCLI for lite-ppo: ``fit``, ``validate`` and ``test`` (the ``lite-ppo`` dispatcher is
``lite_ppo.cli.commands``; it imports this module only for those three commands).

    lite-ppo fit --config configs/recipes/lite_ppo.yaml --config configs/models/tiny.yaml
    lite-ppo validate --config configs/recipes/lite_ppo.yaml --config configs/models/tiny.yaml
    lite-ppo test --config configs/recipes/lite_ppo.yaml --config configs/models/tiny.yaml --ckpt_path last.ckpt

``validate`` evaluates the held-out problems of the training tiers (``data.val_size``, on in the
shipped recipes) and the benchmarks whose files are present, and prints the table; ``test``
evaluates the benchmarks with the code of ``lite-ppo evaluate`` and writes its report.
``predict`` is not offered (``lite-ppo evaluate`` writes responses), nor are ``--optimizer`` /
``--lr_scheduler``: the policy trains with AdamW set by ``model.lr``, ``model.betas``,
``model.weight_decay``, ``model.warmup_steps`` and ``model.lr_schedule``.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import yaml
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch import Callback
from lightning.pytorch.callbacks import ModelSummary
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.utilities import rank_zero_only

from lite_ppo.callbacks.console import ConsoleProgressBar, PolicySummary
from lite_ppo.callbacks.diagnostics import Diagnostics
from lite_ppo.callbacks.evaluation import Evaluation
from lite_ppo.callbacks.rollout import Rollout
from lite_ppo.cli.compose import compose_callbacks
from lite_ppo.cli.machine_load import machine_load_note
from lite_ppo.cli.save_config import AtomicSaveConfig
from lite_ppo.data.datamodule import MathDataModule
from lite_ppo.data.seeding import run_seed
from lite_ppo.errors import UserError, name_the_option, parser_message
from lite_ppo.reliability import CheckpointIntegrity, DivergenceGuard, Preemption
from lite_ppo.reliability.preemption import StartupSignals, StoppedBySignal
from lite_ppo.research.config_diff import config_differences, describe_differences
from lite_ppo.research.run_folder import RunDir
from lite_ppo.research.run_naming import configure_evaluation_dir, earlier_namesake, prepare_fit_run
from lite_ppo.research.run_record import RunRecord
from lite_ppo.technique import refuse_repeated_techniques
from lite_ppo.training.module import LitePPO

TRAINER_DEFAULTS = {
    "log_every_n_steps": 1,
    "logger": {
        "class_path": "lite_ppo.cli.tensorboard_logger.TensorBoardLogger",
        "init_args": {"save_dir": "runs", "name": None, "default_hp_metric": False},
    },  # name/version unset: runs/<recipe>/<model>/seed<S> (research/run_naming.py)
    "num_sanity_val_steps": 0,
}


class LitePPOCLI(LightningCLI):
    """LightningCLI with the rollout and diagnostics callbacks as first-class sections.

    ``rollout:`` and ``diagnostics:`` are instantiated and appended to the trainer's callbacks (after
    the recipe's techniques), so model and hardware configs can override one field of them
    (``rollout.sampling.max_new_tokens``) without restating the callback list; techniques go under
    ``trainer.callbacks`` in recipe order. Diagnostics are always on.

    Subcommands: ``fit``; ``validate`` (adds an ``Evaluation`` callback when the config has none:
    the held-out tiers and the default benchmarks that are present); ``test`` (the benchmark
    evaluation of ``lite-ppo evaluate``, see :meth:`test`). ``predict`` and the
    ``--optimizer`` / ``--lr_scheduler`` groups are not offered (the module builds AdamW itself).
    Parse errors raise ``argparse.ArgumentError`` for the dispatcher (``lite_ppo.cli.commands``) to
    print as one line.
    """

    # -- which subcommands, and how their parsers fail ---------------------------------------------
    def __init__(
        self, *args: Any, only_subcommand: str | None = None, startup: StartupSignals | None = None, **kwargs: Any
    ) -> None:
        # Building one subcommand's parser (not all of them) keeps `lite-ppo fit --help` short.
        self.only_subcommand = only_subcommand
        self.run_dir: Path | None = None  # fit: the run folder (research/run_naming.py)
        self.created_run_dir = False  # fit: the folder did not exist before this command
        self.evaluation_dir: Path | None = None  # validate/test of a run's checkpoint: <run>/<subcommand>
        self.limit: int | None = None  # validate/test --limit: the first N problems of each benchmark
        self.first_step = _FirstStep(startup)
        super().__init__(*args, **kwargs)

    def subcommands(self) -> dict[str, set[str]]:  # LightningCLI's is static; it is always called on the instance
        offered = {name: skip for name, skip in LightningCLI.subcommands().items() if name in LIGHTNING_SUBCOMMANDS}
        return {self.only_subcommand: offered[self.only_subcommand]} if self.only_subcommand else offered

    def init_parser(self, **kwargs: Any):
        # Raise jsonargparse's ArgumentError instead of printing the whole usage and exiting: the
        # lite-ppo dispatcher prints it as one line (lite_ppo.cli.commands.user_error_message).
        kwargs.setdefault("exit_on_error", False)
        return super().init_parser(**kwargs)

    def _prepare_subcommand_parser(self, klass: type, subcommand: str, **kwargs: Any):
        parser = super()._prepare_subcommand_parser(klass, subcommand, **kwargs)
        if subcommand in ("validate", "test"):
            # As `lite-ppo evaluate --limit`: MATH-500 + GSM8K are 1,819 problems, minutes even for the tiny model.
            parser.add_argument(
                "--limit",
                type=int | None,
                default=None,
                help="evaluate only the first N problems of each benchmark (default: all of them)",
            )
        return parser

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_lightning_class_args(Rollout, "rollout")
        parser.add_lightning_class_args(Diagnostics, "diagnostics")
        parser.add_lightning_class_args(ConsoleProgressBar, "console")  # phases, live metrics, summary lines
        # Reliability, on by default (lite_ppo.reliability): signal -> checkpoint + exit 128+signum;
        # atomic, checksummed, verified checkpoints; non-finite optimizer steps skipped.
        parser.add_lightning_class_args(Preemption, "preemption")
        parser.add_lightning_class_args(CheckpointIntegrity, "checkpoint_integrity")
        parser.add_lightning_class_args(DivergenceGuard, "divergence_guard")
        # The recipe names itself (``recipe: lite_ppo``); run directories and run.json carry the name.
        parser.add_argument(
            "--recipe", type=str | None, default=None, help="name of the recipe (set by each recipe YAML)"
        )
        parser.add_lightning_class_args(RunRecord, "run_record")

    def _parse_ckpt_path(self) -> None:
        # LightningCLI replaces the model's settings with the checkpoint's, which silently drops changed
        # --model.* values at resume. For fit, keep the given ones and refuse unsafe changes now, before
        # any model loads; LitePPO.on_load_checkpoint reports the applied ones (lite_ppo.training.resume).
        if self.config.get("subcommand") != "fit":
            return super()._parse_ckpt_path()
        from lite_ppo.training.resume import check_resume, saved_hyperparameters

        ckpt_path = self.config.fit.get("ckpt_path")
        saved = saved_hyperparameters(str(ckpt_path)) if ckpt_path else None
        if saved:
            model = self.config.fit.model.as_dict()
            check_resume(saved, model.get("init_args", model), str(ckpt_path))

    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list) -> Any:
        # `--trainer.enable_progress_bar false` turns the console bar off rather than clashing with it.
        if config.get("enable_progress_bar") is False:
            callbacks = [cb for cb in callbacks if not isinstance(cb, ConsoleProgressBar)]
        # The model summary as one line (PolicySummary) unless turned off or given by the user.
        configured = config.get("callbacks") or []
        configured = configured if isinstance(configured, list) else [configured]
        if config.get("enable_model_summary") is not False and not any(
            isinstance(cb, ModelSummary) for cb in [*configured, *callbacks]
        ):
            callbacks = [*callbacks, PolicySummary()]
        # Evaluation(evaluate_before_training=True) evaluates in the sanity check: all of it (-1).
        if self.subcommand == "fit" and any(
            isinstance(cb, Evaluation) and cb.evaluate_before_training for cb in [*configured, *callbacks]
        ):
            config = {**config, "num_sanity_val_steps": -1}
        try:
            return super()._instantiate_trainer(config, callbacks)
        except MisconfigurationException as err:
            hint = _no_gpu_hint(config)
            if hint is None:
                raise
            raise UserError(f"{hint} (Lightning: {' '.join(str(err).split())})") from err

    def before_instantiate_classes(self) -> None:
        # Unset data / rollout seeds are the run's seed (lite_ppo.data.seeding, set by seed_everything just
        # before): written in, so that the saved config.yaml says which seeds ran.
        config = self.config[self.subcommand] if self.subcommand else self.config
        for section in ("data", "rollout"):
            if config[section].get("seed") is None:
                config[section]["seed"] = run_seed(None)
        # A technique given twice: one line now (Lightning would refuse a repeated stateful callback
        # with a traceback, and a stateless one would silently apply twice).
        refuse_repeated_techniques([_class_of(cb) for cb in config["trainer"].get("callbacks") or []])
        if self.subcommand == "fit":
            # Rank 0 claims the folder now (created: a second run started at once gets seed<S>-1);
            # the other ranks only name it (rank 0's folder is what Lightning broadcasts).
            self.run_dir, self.created_run_dir = prepare_fit_run(self.config["fit"], claim=rank_zero_only.rank == 0)
            notes = [machine_load_note(), self._namesake_note()] if rank_zero_only.rank == 0 else []
            for note in filter(None, notes):
                print(f"lite-ppo fit: note: {note}", file=sys.stderr, flush=True)
        elif self.subcommand in ("validate", "test"):
            self.evaluation_dir = configure_evaluation_dir(config, self.subcommand)
            limit = config.get("limit")
            if limit is not None and limit < 1:
                raise UserError(f"--limit {limit}: must be >= 1 (the number of problems of each benchmark)")
            self.limit = limit

    def instantiate_classes(self) -> None:
        # The classes of the config check their arguments in their constructors and raise ValueError
        # naming them ("SamplingConfig.top_p must be in (0, 1], got 2.0"); raised here, while only
        # constructors run, it can only be the config's mistake: report it as one line.
        try:
            super().instantiate_classes()
        except BaseException as err:
            self._remove_unstarted_run(say=False)  # the folder claimed a moment ago, still empty
            if isinstance(err, ValueError) and not isinstance(err, UserError):
                settings = self.config.get(self.subcommand, self.config).items()
                raise UserError(f"invalid setting: {name_the_option(parser_message(str(err)), settings)}") from err
            raise

    def _namesake_note(self) -> str | None:
        """A run named ``seed<S>-N`` (an earlier run has its recipe, model and seed): which settings set it
        apart from the newest earlier one, or that it repeats it; None for a first run."""
        earlier = earlier_namesake(self.run_dir) if self.run_dir is not None and self.created_run_dir else None
        if earlier is None:
            return None
        before = RunDir(earlier).config
        if before is None:  # unreadable: nothing to compare with
            return None
        try:
            now = yaml.safe_load(self._parser("fit").dump(self.config["fit"], skip_unset=False))
        except (ValueError, TypeError, yaml.YAMLError):
            return None
        if not isinstance(now, dict):
            return None
        differences = config_differences(before, now)
        if not differences:
            return f"{self.run_dir.name} repeats {earlier.name} (the same settings; same recipe, model and seed)"
        return (
            f"{self.run_dir.name} has the recipe, model and seed of {earlier.name} and differs from it in "
            f"{describe_differences(differences)}"
        )

    def _remove_unstarted_run(self, say: bool) -> bool:
        """Remove the run folder this command created when no training step ran (nothing in it is
        worth keeping; left, it would show in TensorBoard and compare and push the next run to
        seed<S>-1). A folder this command did not create is never touched."""
        run_dir = self.run_dir
        if self.subcommand != "fit" or run_dir is None or not self.created_run_dir or self.first_step.started:
            return False
        if not run_dir.exists():
            return False
        shutil.rmtree(run_dir, ignore_errors=True)
        for parent in list(run_dir.parents)[:2]:  # <recipe>/<model> when left empty
            try:
                parent.rmdir()  # only an empty folder goes; another run's content stays
            except OSError:
                break
        if say:
            print(f"lite-ppo fit: the run did not start; removed its folder {run_dir}", flush=True)
        return True

    # -- fit: the run folder is said at start and end, and removed when the run never started -------
    def _run_subcommand(self, subcommand: str) -> None:
        if subcommand != "fit" or self.run_dir is None:
            return super()._run_subcommand(subcommand)
        say = self.trainer.is_global_zero
        if say:
            print(f"lite-ppo fit: run folder {self.run_dir}", flush=True)
        try:
            super()._run_subcommand(subcommand)
        except StoppedBySignal:  # its one line (run_lightning) is all that is said
            self._remove_unstarted_run(say=False)
            raise
        except BaseException:
            if say and not self._remove_unstarted_run(say=True):
                print(f"lite-ppo fit: run folder {self.run_dir}", flush=True)
            raise
        if say:
            print(f"lite-ppo fit: run folder {self.run_dir} (tensorboard --logdir {self.run_dir})", flush=True)

    # -- validate: the held-out tiers and the benchmarks that are present -----------------------------
    def instantiate_trainer(self, **kwargs: Any):
        trainer = super().instantiate_trainer(**kwargs)
        if self.subcommand == "fit":
            trainer.callbacks.append(self.first_step)
        if self.subcommand == "validate":
            trainer.callbacks.append(_CheckpointProgress())
        if self.subcommand in ("fit", "validate") and not any(isinstance(cb, Evaluation) for cb in trainer.callbacks):
            evaluation = self.default_evaluation(self.subcommand)
            if evaluation is not None:
                trainer.callbacks.append(evaluation)
        if self.limit is not None:
            from lite_ppo.evaluation.benchmarks import apply_limit

            for evaluation in (cb for cb in trainer.callbacks if isinstance(cb, Evaluation)):
                evaluation.specs = apply_limit(evaluation.specs, self.limit)
        return trainer

    def default_evaluation(self, subcommand: str) -> Evaluation | None:
        """The ``Evaluation`` callback added when the config has none: ``fit`` reports the held-out
        tiers (when ``data.val_size > 0``); ``validate`` also evaluates every default benchmark whose
        file is present (``$LITE_PPO_EVAL_DIR`` or ``configs/eval/benchmarks.yaml``'s ``data_dir``)."""
        val_size = getattr(self.datamodule, "val_size", 0)
        if subcommand == "fit":
            return Evaluation(benchmarks=[]) if val_size > 0 else None
        specs, data_dir = default_benchmark_specs()
        present, missing, folder = present_benchmarks(specs, data_dir)
        if not present and val_size == 0:
            raise UserError(
                "validate has nothing to evaluate: set data.val_size > 0 (problems "
                "held out per training tier), or put the benchmark files in "
                "$LITE_PPO_EVAL_DIR, or add lite_ppo.callbacks.Evaluation to trainer.callbacks"
            )
        parts = [f"held-out tiers ({val_size} problems each)"] if val_size > 0 else []
        if present:
            sizes = [min(len(problems), self.limit or len(problems)) for _, problems in present]
            limit = "" if self.limit is not None else "; --limit N takes the first N of each"
            parts.append(
                "benchmarks " + ", ".join(spec.name for spec, _ in present) + f" ({sum(sizes):,} problems{limit})"
            )
        note = (
            f"; not found: {', '.join(missing)} (`lite-ppo data fetch NAME`, or $LITE_PPO_EVAL_DIR)" if missing else ""
        )
        print(
            f"lite-ppo validate: evaluating {' and '.join(parts)}{note}. To choose the benchmarks, "
            "add lite_ppo.callbacks.Evaluation to trainer.callbacks.",
            flush=True,
        )
        return Evaluation(
            benchmarks=[_spec_mapping(spec) for spec, _ in present], data_dir=str(folder) if folder else None
        )

    def validate(
        self,
        model: LitePPO,
        datamodule: Any = None,
        ckpt_path: str | None = None,
        verbose: bool = True,
        weights_only: bool | None = None,
    ) -> Any:
        """``Trainer.validate``; Lightning's own metric table is left out when the ``Evaluation``
        callback prints its (compact) tables."""
        printing = any(isinstance(cb, Evaluation) and cb.print_table for cb in self.trainer.callbacks)
        with warnings.catch_warnings():
            # The checkpoint's ModelCheckpoint state names the run's checkpoint folder, this trainer's the
            # validate/ folder; validate saves no checkpoint, so what Lightning does not reload is not used.
            warnings.filterwarnings("ignore", message="The dirpath has changed from")
            return self.trainer.validate(
                model,
                datamodule=datamodule,
                ckpt_path=ckpt_path,
                verbose=verbose and not printing,
                weights_only=weights_only,
            )

    # -- test: the benchmark evaluation of `lite-ppo evaluate` --------------------------------------
    def test(
        self,
        model: LitePPO,
        datamodule: Any = None,
        ckpt_path: str | None = None,
        verbose: bool = True,
        weights_only: bool | None = None,
    ) -> dict[str, Any]:
        """Evaluate the benchmarks (those of a configured ``Evaluation`` callback, else the default
        list) with the config's model or ``ckpt_path``, the ``rollout:`` engine, prompt, reward and
        ``eval_sampling``; print the table and write ``metrics.json``, ``metrics.md`` and
        ``responses.jsonl`` into ``<run>/test`` for a checkpoint inside a run folder, else under
        ``<log dir>/test``. Runs in this process (like ``lite-ppo evaluate``)."""
        from lite_ppo.evaluation.metrics import flatten
        from lite_ppo.evaluation.runner import evaluate_and_report, load_policy_module

        trainer = self.trainer
        rollout = next(cb for cb in trainer.callbacks if isinstance(cb, Rollout))
        evaluation = next((cb for cb in trainer.callbacks if isinstance(cb, Evaluation)), None)
        present = self._test_benchmarks(evaluation)
        if ckpt_path is not None:
            if not Path(str(ckpt_path)).exists():
                raise UserError(f"--ckpt_path {ckpt_path}: no such checkpoint file or folder")
            module = load_policy_module(str(ckpt_path), dtype=model.hparams.torch_dtype)
        else:
            module = model
            module.configure_model()
        module.to(trainer.strategy.root_device)
        module.eval()
        sampling = rollout.eval_sampling
        out = self.evaluation_dir or Path(trainer.log_dir or trainer.default_root_dir) / "test"
        name = str(ckpt_path or model.hparams.model_path)
        info = {
            "model": name,
            "engine": type(rollout.engine).__name__,
            "sampling": dataclasses.asdict(sampling),
        }
        results, info = evaluate_and_report(
            module,
            rollout.producer,
            present,
            sampling,
            out,
            info,
            title=lambda wall: f"Test: {name}",
            batch_size=evaluation.batch_size if evaluation is not None else 32,
            seed=rollout.seed,
            ks=evaluation.pass_k if evaluation is not None else None,
            progress=verbose,
        )
        groups = {**results["groups"], **{k: results[k] for k in ("average", "weighted_average") if results.get(k)}}
        for logger in trainer.loggers:
            logger.log_metrics(flatten("test", groups), step=trainer.global_step)
        return results

    def _test_benchmarks(self, evaluation: Evaluation | None) -> list:
        """The benchmarks ``test`` evaluates, loaded: those of the configured ``Evaluation`` callback, else
        the default list, cut by ``--limit``; the missing ones are named, none present is an error."""
        specs, data_dir = (
            (evaluation.specs, evaluation.data_dir) if evaluation is not None else default_benchmark_specs()
        )
        if self.limit is not None:
            from lite_ppo.evaluation.benchmarks import apply_limit

            specs = apply_limit(specs, self.limit)
        # Benchmarks a configured Evaluation callback names are fetched when missing (as `lite-ppo evaluate`
        # fetches what --benchmarks names); the default list is evaluated where present.
        present, missing, _ = present_benchmarks(specs, data_dir, fetch_missing=None if evaluation else False)
        if not present:
            raise UserError(
                f"test found none of the benchmark files ({', '.join(missing) or 'no benchmarks configured'}): "
                "set $LITE_PPO_EVAL_DIR to the folder holding them, or give "
                "lite_ppo.callbacks.Evaluation(benchmarks=..., data_dir=...) in trainer.callbacks"
            )
        if missing:
            print(
                f"lite-ppo test: not found, skipped: {', '.join(missing)} "
                "(`lite-ppo data fetch NAME`, or $LITE_PPO_EVAL_DIR)",
                flush=True,
            )
        return present


class _FirstStep(Callback):
    """Notes that a training step began: until then a failed ``fit`` has nothing worth keeping, and a
    SIGTERM stops it at once (``startup``); from then on a signal lets the step finish (``Preemption``)."""

    def __init__(self, startup: StartupSignals | None = None) -> None:
        self.started = False
        self.startup = startup

    def on_train_batch_start(self, trainer, pl_module, batch: Any, batch_idx: int) -> None:
        self.started = True
        if self.startup is not None:
            self.startup.training_started()


class _CheckpointProgress(Callback):
    """``validate --ckpt_path``: the trainer takes the checkpoint's training progress, so the evaluation is
    reported and logged at the step the checkpoint reached (Lightning restores only the validation loop's
    progress outside ``fit``: every table would say "global step 0")."""

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        fit_loop = (checkpoint.get("loops") or {}).get("fit_loop")
        if fit_loop:  # added for validate only
            trainer.fit_loop.load_state_dict(fit_loop)


# The LightningCLI subcommands lite-ppo offers (predict is not: see lite_ppo.cli.commands.REMOVED).
LIGHTNING_SUBCOMMANDS = ("fit", "validate", "test")
# Options LightningCLI users may expect; the module builds its optimizer (AdamW, DeepSpeed's under ZeRO).
_NOT_OFFERED = ("--optimizer", "--lr_scheduler")


def _class_of(entry: Any) -> type | None:
    """The class a parsed ``trainer.callbacks`` entry names (jsonargparse has imported it already)."""
    path = entry.get("class_path") if hasattr(entry, "get") else None
    if not isinstance(path, str) or "." not in path:
        return None
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None


def run_lightning(argv: list[str]) -> None:
    """Run one LightningCLI subcommand: ``argv`` = ``[fit|validate|test, options...]``."""
    name = argv[0]
    for arg in argv[1:]:
        if arg.split("=", 1)[0].split(".", 1)[0] in _NOT_OFFERED:
            raise UserError(
                f"{arg.split('=', 1)[0]} is not an option of lite-ppo: the policy trains with AdamW; set model.lr, "
                "model.betas, model.weight_decay, model.warmup_steps and model.lr_schedule (constant|cosine)"
            )
    # A SIGTERM while fit starts up (minutes with a large model) stops it at once, in one line, instead of
    # after the start-up and a first training step (lite_ppo.reliability.preemption.StartupSignals).
    startup = StartupSignals().install() if name == "fit" else None
    try:
        _run_cli(name, argv, startup)
    except StoppedBySignal as stop:
        if rank_zero_only.rank == 0:
            print(f"lite-ppo {name}: stopped by {stop.signum.name} {stop.when}", file=sys.stderr, flush=True)
        raise SystemExit(stop.code) from None
    finally:
        if startup is not None:
            startup.uninstall()


def _run_cli(name: str, argv: list[str], startup: StartupSignals | None) -> None:
    # Several --config files with callback lists: merged by class, not the last list replacing the others.
    argv, merged = compose_callbacks(argv)
    if merged and rank_zero_only.rank == 0:
        print(f"lite-ppo {name}: {merged}", file=sys.stderr, flush=True)  # stdout may be --print_config
    # vLLM on CPU must run in-process for in-place weight updates.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    # The dispatcher passes the arguments (it removed --debug); Lightning warns when sys.argv has some too.
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
    try:
        LitePPOCLI(
            LitePPO,
            MathDataModule,
            args=argv,
            trainer_defaults=TRAINER_DEFAULTS,
            seed_everything_default=42,
            save_config_callback=AtomicSaveConfig,
            save_config_kwargs={"overwrite": True},
            auto_configure_optimizers=False,
            only_subcommand=name,
            startup=startup,
        )
    except MisconfigurationException as err:
        # Lightning's own verdict on a trainer setting (an unavailable accelerator, conflicting flags).
        raise UserError(" ".join(str(err).split())) from err


def _no_gpu_hint(trainer_config: dict[str, Any]) -> str | None:
    """Why a trainer that asks for GPUs cannot start on this machine, and what runs here instead; None when
    it does not ask for GPUs or CUDA is there (then Lightning's own message says what is wrong)."""
    import torch

    accelerator = str(trainer_config.get("accelerator") or "")
    if accelerator not in ("gpu", "cuda") or torch.cuda.is_available():
        return None
    strategy = trainer_config.get("strategy")
    name = strategy if isinstance(strategy, str) else type(strategy).__name__
    if "deepspeed" in name.lower():
        # configs/strategies/zero3*.yaml: the CPU strategy runs the same ZeRO-3 code paths, for tests.
        return (
            f"trainer.accelerator {accelerator} with DeepSpeed (configs/strategies/zero3.yaml, zero3_offload.yaml) "
            "needs CUDA GPUs and this machine has none; on a CPU use configs/strategies/zero3_cpu_test.yaml "
            "instead (ZeRO-3 with 2 gloo processes, for tests; launched with torchrun, see docs/scaling.md)"
        )
    return (
        f"trainer.accelerator {accelerator}: needs a CUDA GPU and this machine has none; "
        "use --trainer.accelerator cpu (or auto)"
    )


def default_benchmark_specs() -> tuple[list, str | None]:
    """The benchmarks of ``configs/eval/benchmarks.yaml`` when run from the repository (as
    ``lite-ppo evaluate`` does), else the built-in list; and the data folder that file names."""
    from lite_ppo.evaluation.benchmarks import load_benchmark_config
    from lite_ppo.evaluation.command import DEFAULT_BENCHMARK_CONFIG

    return load_benchmark_config(DEFAULT_BENCHMARK_CONFIG if Path(DEFAULT_BENCHMARK_CONFIG).is_file() else None)


def present_benchmarks(
    specs: list, data_dir: str | None, fetch_missing: bool | None = False
) -> tuple[list, list[str], Path | None]:
    """``([(spec, problems)], [missing names], folder)``: the benchmarks whose file exists (a
    malformed file still fails) in ``folder`` = ``data_dir``, else ``$LITE_PPO_EVAL_DIR``, else shipped
    or cached. ``fetch_missing``: fetch a missing registered set from the Hub first; off by default, as
    the default list (aime24, ...) is only what to evaluate when present: without a network a fetch
    would only fail, and with one it would download what nobody asked for."""
    from lite_ppo.data.registry import DatasetMissing
    from lite_ppo.evaluation.benchmarks import load_benchmark, resolve_data_dir

    try:
        folder = resolve_data_dir(None, data_dir)
    except FileNotFoundError as err:  # a folder was named but is not there
        raise UserError(f"{err} (Evaluation.data_dir, the benchmark YAML's data_dir or $LITE_PPO_EVAL_DIR)") from err
    present, missing = [], []
    for spec in specs:
        try:
            present.append((spec, load_benchmark(spec, folder, fetch_missing)))
        except (FileNotFoundError, DatasetMissing):
            missing.append(spec.name)
    return present, missing, folder


def _spec_mapping(spec) -> dict[str, Any]:
    """A ``BenchmarkSpec`` as the mapping ``Evaluation(benchmarks=[...])`` takes (every field kept)."""
    return dataclasses.asdict(spec)
