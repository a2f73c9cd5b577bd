"""The ``lite-ppo`` command: LightningCLI (fit / validate / test) plus project commands.

    lite-ppo fit --config configs/quickstart.yaml
    lite-ppo fit --config configs/recipes/lite_ppo.yaml --config configs/models/smollm2_cpu.yaml
    lite-ppo prepare-model builtin:smollm2-135m-instruct
    lite-ppo evaluate --model runs/ckpt/last.ckpt --data-dir ../shared/data/eval --out eval_out
"""

from __future__ import annotations

import argparse
import os
import sys

from lightning.pytorch.cli import LightningCLI

from lite_ppo.callbacks.diagnostics import Diagnostics
from lite_ppo.callbacks.rollout import Rollout
from lite_ppo.data.datamodule import MathDataModule
from lite_ppo.module import LitePPO

TRAINER_DEFAULTS = {
    "log_every_n_steps": 1,
    "logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger", "init_args": {"save_dir": "runs", "name": "lite_ppo"}},
    "num_sanity_val_steps": 0,
}


class LitePPOCLI(LightningCLI):
    """LightningCLI with the rollout and diagnostics callbacks as first-class sections.

    ``rollout:`` and ``diagnostics:`` are instantiated and appended to the trainer's callbacks (after
    the recipe's techniques), so model and hardware configs can override one field of them
    (``rollout.sampling.max_new_tokens``) without restating the callback list; techniques go under
    ``trainer.callbacks`` in recipe order. Diagnostics are always on.
    """

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_lightning_class_args(Rollout, "rollout")
        parser.add_lightning_class_args(Diagnostics, "diagnostics")


PROJECT_COMMANDS = {
    "prepare-model": "build or convert a builtin model into the local cache and print its folder",
    "evaluate": "evaluate a model folder, builtin or .ckpt on math benchmarks (metrics.json, metrics.md, responses.jsonl)",
    "export-hf": "write a Hugging Face folder (save_pretrained + tokenizer) from a checkpoint, DeepSpeed ZeRO shards included",
}


def _project_command(argv: list[str], name: str = "prepare-model") -> int:
    if name == "evaluate":
        from lite_ppo.evaluation.command import main as evaluate

        return evaluate(argv)
    if name == "export-hf":
        from lite_ppo.export import main as export_hf

        return export_hf(argv)
    parser = argparse.ArgumentParser(prog="lite-ppo prepare-model", description=PROJECT_COMMANDS["prepare-model"])
    parser.add_argument("name", help="builtin:tiny or builtin:smollm2-135m-instruct")
    args = parser.parse_args(argv)
    from lite_ppo.models import resolve_model

    print(resolve_model(args.name))
    return 0


def main(argv: list[str] | None = None) -> None:
    command = sys.argv[1:] if argv is None else argv
    if command and command[0] in PROJECT_COMMANDS:
        raise SystemExit(_project_command(command[1:], command[0]))
    # vLLM on CPU must run in-process for in-place weight updates (DESIGN.md).
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    LitePPOCLI(
        LitePPO,
        MathDataModule,
        args=argv,  # None: LightningCLI reads sys.argv itself (passing it too makes Lightning warn)
        trainer_defaults=TRAINER_DEFAULTS,
        seed_everything_default=42,
        save_config_kwargs={"overwrite": True},
    )


if __name__ == "__main__":
    main()
