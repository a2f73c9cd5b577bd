"""The ``lite-ppo`` command line: one table of subcommands, one help, one-line errors.

Every subcommand is a row of :data:`COMMANDS`: its name, a one-line summary and where it runs, given
as a ``"module:function"`` string that is imported only when that command runs. So ``lite-ppo
--help`` and ``lite-ppo <project command> --help`` answer without importing torch, Lightning or
transformers; ``fit`` / ``validate`` / ``test`` build LightningCLI's parser (``lite_ppo.cli``), except
for their plain ``--help``, which comes from a cache once built (``lite_ppo.cli.help_cache``).

Errors a user can fix (:class:`lite_ppo.errors.UserError`, and LightningCLI's parse errors) end in one
line on stderr, ``lite-ppo <command>: error: ...``, with exit status 2 and no traceback. ``--debug``
anywhere on the command line, or ``LITE_PPO_DEBUG=1``, shows the traceback instead.

Example::

    lite-ppo --help
    lite-ppo fit --config configs/recipes/lite_ppo.yaml --config configs/models/tiny.yaml
    lite-ppo fit --config ... --model.lr abc      # lite-ppo fit: error: model.lr: expected float, got 'abc' ...
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import threading
from dataclasses import dataclass

from lite_ppo.cli.allocator import retain_freed_memory
from lite_ppo.errors import UserError, one_line, parser_message, storage_error, storage_message

__all__ = ["COMMANDS", "REMOVED", "Command", "main"]

PROG = "lite-ppo"
DEBUG_FLAG = "--debug"
DEBUG_ENV = "LITE_PPO_DEBUG"


@dataclass(frozen=True)
class Command:
    """One subcommand: ``target`` is ``"module:function"``; the function takes the arguments after
    the command name (LightningCLI subcommands: the whole list, name first) and returns an exit code."""

    name: str
    summary: str
    target: str
    lightning: bool = False


COMMANDS: tuple[Command, ...] = (
    Command(
        "fit",
        "train a policy with a recipe (LightningCLI): --config RECIPE.yaml --config MODEL.yaml",
        "lite_ppo.cli.lightning_cli:run_lightning",
        lightning=True,
    ),
    Command(
        "validate",
        "evaluate the held-out training problems and the benchmarks present; print the table",
        "lite_ppo.cli.lightning_cli:run_lightning",
        lightning=True,
    ),
    Command(
        "test",
        "evaluate the benchmarks with the config's model or --ckpt_path; print and write the report",
        "lite_ppo.cli.lightning_cli:run_lightning",
        lightning=True,
    ),
    Command(
        "evaluate",
        "evaluate a model folder, builtin or checkpoint on math benchmarks; write metrics and responses",
        "lite_ppo.evaluation.command:main",
    ),
    Command(
        "prepare-model",
        "build or convert a builtin model into the local cache and print its folder",
        "lite_ppo.cli.prepare_model:main",
    ),
    Command(
        "export-hf",
        "write a Hugging Face folder from a checkpoint (DeepSpeed ZeRO shards included)",
        "lite_ppo.checkpoints.export:main",
    ),
    Command(
        "data",
        "list, fetch and locate the registered datasets (benchmarks and training tiers)",
        "lite_ppo.data.command:main",
    ),
    Command(
        "compare",
        "figures over steps, tokens or seconds and a summary of runs: 95 % CIs, pairwise tests, factorial effects",
        "lite_ppo.research.compare:main",
    ),
    Command(
        "plan",
        "seeds per cell for a target minimum detectable effect, and the wall time, from a pilot's runs",
        "lite_ppo.research.plan:main",
    ),
    Command(
        "sweep",
        "run a grid of recipes x seeds (x factors), one named run each, resumable; then compare them",
        "lite_ppo.research.sweep:main",
    ),
    Command(
        "advise",
        "read a run's diagnostics and say which technique to add or remove, with the YAML",
        "lite_ppo.research.advise:main",
    ),
)

# LightningCLI subcommands lite-ppo does not offer, and what to use instead (one line each).
REMOVED: dict[str, str] = {
    "predict": "not offered; to write responses use "
    "`lite-ppo evaluate --model MODEL --benchmarks FILE_OR_YAML --out DIR` "
    "(every response goes to DIR/responses.jsonl; see `lite-ppo evaluate --help`)",
}

_BY_NAME = {command.name: command for command in COMMANDS}


def usage() -> str:
    """The top-level help: every subcommand with its one line, from :data:`COMMANDS`."""
    width = max(len(c.name) for c in COMMANDS) + 2
    lines = [
        f"usage: {PROG} [--debug] COMMAND [options]",
        "",
        "Critic-free PPO (Lite PPO and the techniques of 'Tricks or Traps?') for LLM reasoning on verifiable math.",
        "",
        "commands:",
        *(f"  {c.name:<{width}}{c.summary}" for c in COMMANDS),
        "",
        "options:",
        f"  {'-h, --help':<{width}}show this message; `{PROG} COMMAND --help` shows a command's options",
        f"  {DEBUG_FLAG:<{width}}show the Python traceback of an error (also: {DEBUG_ENV}=1)",
        "",
        f"example: {PROG} fit --config configs/recipes/lite_ppo.yaml --config configs/models/tiny.yaml",
    ]
    return "\n".join(lines)


def debug_enabled(argv: list[str]) -> bool:
    return DEBUG_FLAG in argv or os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


def main(argv: list[str] | None = None) -> int | None:
    """Run ``lite-ppo`` with ``argv`` (default: ``sys.argv[1:]``).

    LightningCLI subcommands return ``None`` when they finish; project commands end with
    ``SystemExit(code)`` (as ``argparse`` does); user errors end with ``SystemExit(2)`` after one line
    on stderr (re-raised as they are with ``--debug`` or ``LITE_PPO_DEBUG=1``). Output piped into a
    reader that stops early (``lite-ppo --help | head``) ends quietly.
    """
    try:
        return _run(argv)
    except BrokenPipeError:
        # The reader is gone: point stdout at devnull so the interpreter's final flush does not
        # raise again (the recipe of Python's signal documentation), and exit like `head`'s writer.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(141) from None


def _run(argv: list[str] | None) -> int | None:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = debug_enabled(args)
    args = [a for a in args if a != DEBUG_FLAG]
    if not args:
        print(usage(), file=sys.stderr)
        raise SystemExit(2)
    if args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = args[0], args[1:]
    prog = f"{PROG} {name}" if name in _BY_NAME or name in REMOVED else PROG
    try:
        if name in REMOVED:
            raise UserError(REMOVED[name])
        command = _BY_NAME.get(name)
        if command is None:
            hint = "put options after the command" if name.startswith("-") else f"unknown command {name!r}"
            raise UserError(f"{hint}; the commands are: {', '.join(_BY_NAME)} (see `{PROG} --help`)")
        if command.lightning and argv is None:
            # `fit|validate|test --help` from the stored text when nothing it depends on changed
            # (lite_ppo.cli.help_cache): LightningCLI's parser takes seconds to build, most of it imports.
            from lite_ppo.cli.help_cache import serve

            status = serve(name, rest)
            if status is not None:
                raise SystemExit(status)
        function = _load(command.target)
        quiet_storage_errors_in_threads()
        # Before the command allocates anything large: freed memory stays for the next tensor
        # (lite_ppo.cli.allocator; LITE_PPO_RETAIN_FREED_MEMORY=0 turns it off).
        retain_freed_memory()
        if command.lightning:
            return function([name, *rest])
        raise SystemExit(function(rest))
    except Exception as err:  # noqa: BLE001 (only user errors are caught; everything else is re-raised)
        message = user_error_message(err, prog)
        if message is None or debug:
            raise
        message += negative_value_hint(message, args)
        print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


def user_error_message(err: BaseException, prog: str = PROG) -> str | None:
    """One line for an error the user caused, or None for anything else (a bug: keep the traceback).

    User errors are :class:`UserError` (raised by the project where it validates input) and
    ``argparse.ArgumentError`` (raised by LightningCLI's jsonargparse parser: unknown option, bad
    value, missing config file).
    """
    if isinstance(err, UserError):
        return one_line(str(err))
    if isinstance(err, argparse.ArgumentError):
        problem = class_path_problem(err)
        if problem is not None:
            key = re.match(r'\s*Parser key "([^"]+)":', str(err))
            return f"{key.group(1) + ': ' if key else ''}{problem} (`{prog} --help` lists the options)"
        return f"{parser_message(str(err))} (`{prog} --help` lists the options)"
    refused = storage_error(err)
    if refused is not None:  # the filesystem turned read-only or full: the run stops, what was saved stays
        return f"{storage_message(refused)} (it stopped here; the files written before, checkpoints too, are kept)"
    return None


def quiet_storage_errors_in_threads() -> None:
    """A writer thread (TensorBoard's event writer) whose write the filesystem refuses prints one
    warning line instead of a traceback; the main thread stops with one line at its next write."""
    previous = threading.excepthook
    if getattr(previous, "lite_ppo_storage_hook", False):
        return

    def hook(args: threading.ExceptHookArgs) -> None:
        refused = storage_error(args.exc_value)
        if refused is None:
            previous(args)
            return
        print(f"{PROG}: warning: {storage_message(refused)} (in a background writer)", file=sys.stderr, flush=True)

    hook.lite_ppo_storage_hook = True  # type: ignore[attr-defined]
    threading.excepthook = hook


def class_path_problem(err: BaseException) -> str | None:
    """Why a ``class_path`` could not be used (``class_path 'my.Thing': No module named 'my'``), from
    the exceptions jsonargparse chained; its final message keeps only "Problem with given class_path"."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        found = re.match(r"Problem with given class_path '([^']+)':\s*(\S.*)", str(err), flags=re.DOTALL)
        if found:
            return f"class_path '{found.group(1)}': {one_line(found.group(2))}"
        err = err.__cause__ or err.__context__
    return None


def negative_value_hint(message: str, args: list[str]) -> str:
    """``--model.lr -1e-4`` reads ``-1e-4`` as an option ("expected one argument"): say how to write it."""
    found = re.search(r"argument (--[\w.\-]+): expected one argument", message)
    if not found:
        return ""
    option = found.group(1)
    for given, value in zip(args, args[1:]):
        if given == option and re.fullmatch(r"-(\d|\.\d|inf)[\w.+\-]*", value):
            return f"; a value starting with '-' is read as an option: write {option}={value}"
    return ""


def _load(target: str):
    module_name, _, function = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name is not None and module_name.startswith(err.name):  # the command's own module is missing
            raise UserError(f"this installation of lite-ppo has no {module_name!r} (reinstall the package)") from err
        raise
    return getattr(module, function)


if __name__ == "__main__":
    sys.exit(main())
