"""Where a ``fit`` writes: ``<save_dir>/<recipe>/<model>/seed<S>``, never over an existing run.

The TensorBoard logger writes its event files to ``save_dir/name/version``; LightningCLI saves the
merged ``config.yaml`` and :class:`~lite_ppo.research.run_record.RunRecord` writes ``run.json`` into
the same folder, so one directory holds everything a later ``lite-ppo compare`` or ``lite-ppo
advise`` reads. The parts:

- ``recipe``: the recipe's own top-level ``recipe:`` field (``recipe: lite_ppo`` in
  ``configs/recipes/lite_ppo.yaml``), ``custom`` when no config names one. Never guessed from a file name.
- ``model``: ``builtin:tiny`` -> ``tiny``; a folder or file -> its base name (``/m/Qwen3-4B-Base`` ->
  ``Qwen3-4B-Base``); ``+lora`` appended when ``model.lora`` trains adapters (``lite_ppo/tiny+lora/seed42``).
- ``seed<S>``: ``seed_everything``; a second run with the same name gets ``seed<S>-1``, ``seed<S>-2``, ...
  The CLI claims the folder by creating it (``os.mkdir``, atomic), so two runs started at the same moment
  never share one: the second gets ``seed<S>-1``. Such a run says at start which settings set it apart from
  the newest earlier run of its name (:func:`earlier_namesake`, :mod:`lite_ppo.research.config_diff`).

Resuming (``--ckpt_path`` inside ``<save_dir>/<recipe>/<model>/<run>/``) continues writing into
that run's folder. Only what the user left unset is filled in: ``--trainer.logger.init_args.name`` replaces
``<recipe>/<model>``, ``--trainer.logger.init_args.version`` replaces ``seed<S>`` (taken as given; a
version naming a folder that already holds a run is refused unless ``--ckpt_path`` resumes one), ``save_dir``
defaults to ``runs``.

``validate`` and ``test`` of a checkpoint inside a run's folder write their logs (and ``test`` its
report) into ``<run>/validate/`` and ``<run>/test/`` (:func:`configure_evaluation_dir`). A ``fit``
that fails before its first training step leaves no folder behind (the CLI removes the folder it
created, and only that one), so the next run is not pushed to ``seed<S>-1``.

Example:
    >>> model_name("builtin:smollm2-135m-instruct")
    'smollm2-135m-instruct'
    >>> run_name("lite_ppo", "/data/models/Qwen3-4B-Base/")
    'lite_ppo/Qwen3-4B-Base'
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from lite_ppo.errors import UserError
from lite_ppo.research.run_folder import CONFIG_FILE, RunDir

__all__ = [
    "DEFAULT_RECIPE",
    "configure_evaluation_dir",
    "configure_run_dir",
    "model_name",
    "prepare_fit_run",
    "refuse_another_runs_folder",
    "run_folder_of",
    "run_name",
    "claim_version",
    "earlier_namesake",
    "unique_version",
]

DEFAULT_RECIPE = "custom"
_BUILTIN_PREFIX = "builtin:"
_UNSAFE = re.compile(r"[^A-Za-z0-9._+=-]+")


def model_name(model_path: str) -> str:
    """The model part of a run name: the builtin's name or the path's base name, filesystem-safe."""
    text = str(model_path)
    if text.startswith(_BUILTIN_PREFIX):
        text = text[len(_BUILTIN_PREFIX) :]
    else:
        text = Path(text.rstrip("/\\")).name or text
        if text.endswith(".ckpt"):
            text = text[: -len(".ckpt")]
    return _UNSAFE.sub("_", text).strip("_") or "model"


def run_name(recipe: str | None, model_path: str) -> str:
    """``<recipe>/<model>``: the TensorBoard logger's ``name`` (the seed goes into its ``version``)."""
    recipe_part = _UNSAFE.sub("_", recipe or DEFAULT_RECIPE).strip("_") or DEFAULT_RECIPE
    return f"{recipe_part}/{model_name(model_path)}"


def unique_version(parent: Path, base: str) -> str:
    """``base`` if ``parent/base`` does not exist, else the first free ``base-1``, ``base-2``, ..."""
    if not (parent / base).exists():
        return base
    k = 1
    while (parent / f"{base}-{k}").exists():
        k += 1
    return f"{base}-{k}"


def claim_version(parent: Path, base: str) -> str:
    """Create the first free of ``parent/base``, ``base-1``, ``base-2``, ... and return its name.

    ``mkdir`` fails on an existing folder, so of two processes asking at once each gets its own."""
    try:
        parent.mkdir(parents=True, exist_ok=True)
        k = 0
        while True:
            name = base if k == 0 else f"{base}-{k}"
            try:
                (parent / name).mkdir()
                return name
            except FileExistsError:
                k += 1
    except OSError as err:
        raise UserError(
            f"run folder {parent / base}: cannot create it ({err.strerror or err}); "
            "choose a writable --trainer.logger.init_args.save_dir"
        ) from None


def earlier_namesake(run_dir: Path) -> Path | None:
    """For ``.../seed42-2``, the newest earlier run of its name that saved a config (``seed42-1``, else
    ``seed42``); None for a first run or when none did."""
    match = re.fullmatch(r"(.+)-(\d+)", run_dir.name)
    if match is None:
        return None
    base, k = match.group(1), int(match.group(2))
    for name in [f"{base}-{j}" for j in range(k - 1, 0, -1)] + [base]:
        if (run_dir.parent / name / CONFIG_FILE).is_file():
            return run_dir.parent / name
    return None


def _get(node: Any, key: str, default: Any = None) -> Any:
    """Read ``key`` from a jsonargparse Namespace or a dict."""
    if node is None:
        return default
    if isinstance(node, dict):
        return node.get(key, default)
    return getattr(node, key, default)


def _set(node: Any, key: str, value: Any) -> None:
    if isinstance(node, dict):
        node[key] = value
    else:
        setattr(node, key, value)


def configure_run_dir(config: Any, claim: bool = False) -> tuple[Path | None, bool]:
    """Fill the TensorBoard logger's unset ``name``/``version`` in a parsed ``fit`` config (in place)
    and return the run directory (None when the run has no TensorBoard logger) and whether this call
    created it.

    Called by the CLI before the classes are instantiated, so the logger, the saved ``config.yaml``
    and ``run.json`` all land in the returned folder. With ``claim`` (the CLI's rank 0) a version
    chosen here is created at once (:func:`claim_version`); other ranks only name it.
    """
    logger = _get(_get(config, "trainer"), "logger")
    if not logger or isinstance(logger, (bool, list)):
        return None, False
    class_path = str(_get(logger, "class_path", ""))
    if not class_path.endswith("TensorBoardLogger"):
        return None, False
    init_args = _get(logger, "init_args")
    if init_args is None:
        return None, False
    created = False
    save_dir = _get(init_args, "save_dir") or "runs"
    name = _get(init_args, "name")
    version = _get(init_args, "version")
    seed = _get(config, "seed_everything")
    if not name:
        name = run_name(_get(config, "recipe"), str(_get(_get(config, "model"), "model_path", "model")))
        if _get(_get(config, "model"), "lora"):  # adapters on a frozen base: another experiment, said in the name
            name = f"{name}+lora"
        _set(init_args, "name", name)
    if version is None or version == "":
        resumed = _run_of_checkpoint(_get(config, "ckpt_path"), Path(save_dir) / name)
        base = f"seed{seed}" if isinstance(seed, int) and not isinstance(seed, bool) else "seed_none"
        if resumed:
            version = resumed
        elif claim:
            version, created = claim_version(Path(save_dir) / name, base), True
        else:
            version = unique_version(Path(save_dir) / name, base)
        _set(init_args, "version", version)
    else:
        if isinstance(version, int):
            version = f"version_{version}"
        # Only a checkpoint of the run in that folder continues it there; another run's would write beside it.
        if claim and _run_of_checkpoint(_get(config, "ckpt_path"), Path(save_dir) / name) != str(version):
            refuse_another_runs_folder(Path(save_dir) / name / str(version))
    _set(init_args, "save_dir", str(save_dir))
    return Path(save_dir) / name / str(version), created


def refuse_another_runs_folder(run_dir: Path) -> None:
    """One line when an explicit version names a folder that already holds a run and no checkpoint of that
    run resumes it:
    a second fit there would replace that run's config.yaml and interleave its event files with the
    other's (and ``compare`` would read them as one run)."""
    if RunDir.is_run(run_dir):
        raise UserError(
            f"run folder {run_dir} holds another run: give another --trainer.logger.init_args.version (or leave "
            "it unset for a new seed<S>-N folder), or --ckpt_path to resume that run"
        )


def run_folder_of(ckpt_path: Any) -> Path | None:
    """The run folder that holds ``ckpt_path`` (``<run>/checkpoints/last.ckpt`` or ``<run>/last.ckpt``):
    the checkpoint's folder or the one above it, when it holds ``run.json``, or ``config.yaml`` beside
    TensorBoard event files (what ``fit`` writes); None otherwise."""
    run = RunDir.of_checkpoint(ckpt_path)
    return run.path if run is not None else None


def configure_evaluation_dir(config: Any, subcommand: str) -> Path | None:
    """For ``validate`` / ``test`` of a checkpoint inside a run folder, point the TensorBoard logger at
    ``<run>/<subcommand>`` (in place, only when its ``name`` and ``version`` are unset) and return that
    folder; None otherwise (the logger's own defaults apply)."""
    run = run_folder_of(_get(config, "ckpt_path"))
    logger = _get(_get(config, "trainer"), "logger")
    if run is None or not logger or isinstance(logger, (bool, list)):
        return None
    init_args = _get(logger, "init_args")
    if not str(_get(logger, "class_path", "")).endswith("TensorBoardLogger") or init_args is None:
        return None
    if _get(init_args, "name") or _get(init_args, "version") not in (None, ""):
        return None  # the user chose where the logs go
    _set(init_args, "save_dir", str(run.parent))
    _set(init_args, "name", run.name)
    _set(init_args, "version", subcommand)
    return run / subcommand


def _run_of_checkpoint(ckpt_path: Any, parent: Path) -> str | None:
    """The run folder under ``parent`` that holds ``ckpt_path`` (resuming continues that run), else None."""
    if not ckpt_path or not isinstance(ckpt_path, (str, Path)) or not parent.is_dir():
        return None
    parent = parent.resolve()
    for folder in Path(ckpt_path).resolve().parents:
        if folder.parent == parent:
            return folder.name
    return None


def prepare_fit_run(config: Any, claim: bool = False) -> tuple[Path | None, bool]:
    """The CLI's ``before_instantiate_classes`` for ``fit``: name (and with ``claim``, create) the run
    directory (:func:`configure_run_dir`) and tell the ``run_record:`` section what the run is.
    Returns the folder and whether this call created it."""
    run_dir, created = configure_run_dir(config, claim)
    record = _get(config, "run_record")
    if record is None:
        return run_dir, created
    model_path = str(_get(_get(config, "model"), "model_path", ""))
    data = _get(config, "data")
    seed = _get(config, "seed_everything")
    fields = {
        "recipe": _get(config, "recipe") or DEFAULT_RECIPE,
        "model": model_path,
        "model_name": model_name(model_path) if model_path else None,
        "seed": seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
        "data": {
            "sources": _plain(_get(data, "sources")),
            "weights": _plain(_get(data, "weights")),
            "schedule": _plain(_get(data, "schedule")),
        },
    }
    for key, value in fields.items():
        if _get(record, key) is None:  # what the user set explicitly wins
            _set(record, key, value)
    return run_dir, created


def _plain(value: Any) -> Any:
    """A jsonargparse Namespace / nested structure as plain dicts and lists (for JSON)."""
    if hasattr(value, "as_dict"):
        return value.as_dict()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
