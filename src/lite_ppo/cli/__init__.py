"""The command line: ``lite-ppo`` and its commands.

- :mod:`lite_ppo.cli.commands`: the entry point, the table of commands (each imported only when it runs).
- :mod:`lite_ppo.cli.lightning_cli`: ``fit`` / ``validate`` / ``test`` (LightningCLI).
- :mod:`lite_ppo.cli.help_cache`: their ``--help``, stored at install so it answers at once.
- :mod:`lite_ppo.cli.allocator`: the process start-up's memory allocator setting.
- :mod:`lite_ppo.cli.prepare_model`: ``lite-ppo prepare-model`` (the other commands live with their part:
  ``evaluation.command``, ``data.command``, ``checkpoints.export``, ``research.*``).

``python -m lite_ppo.cli fit ...`` is ``lite-ppo fit ...`` (what ``torchrun`` and ``sweep`` start).
"""

from lite_ppo.cli.commands import main

__all__ = ["main"]


def __getattr__(name: str):
    # LightningCLI's module imports Lightning and the callbacks: only when a name of it is asked for.
    if name in ("LitePPOCLI", "run_lightning", "TRAINER_DEFAULTS"):
        from lite_ppo.cli import lightning_cli

        return getattr(lightning_cli, name)
    raise AttributeError(f"module 'lite_ppo.cli' has no attribute {name!r}")
