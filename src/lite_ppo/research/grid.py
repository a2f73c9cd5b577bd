"""The grid of a sweep: recipes x seeds x factors x config axes x override axes, each point one ``fit`` command.

A point's ``sweep_key`` (a hash of its recipe, configs, overrides, cell and seed) is passed to the run
(``--run_record.sweep_key``) and lands in its ``run.json``; that is how a later sweep recognises a
point that already finished. Points with factor, config or override variants write under
``<out>/<variant>/`` (``norm=batch_std_agg=token``) so that ``<recipe>/<model>/seed<S>`` stays unique
per variant. A factorial point (:mod:`lite_ppo.research.factors`) gets its cell's merged fragments as
one more config (inline JSON, after the recipe and configs) and passes its cell and the design to the
run (``--run_record.cell``, ``--run_record.factors``), which ``lite-ppo compare`` reads back.

The points come seed by seed (every recipe and cell of the first seed, then of the second, ...), the
order a sweep runs them in: a sweep stopped anywhere (a signal, ``--no-start-after``) leaves whole seeds
but the last (the same command completes it),
which the per-seed contrasts of ``compare`` read, and under ``--parallel`` the cells of one seed run side
by side, on the same machine load.

Example:
    >>> points = expand_grid(["configs/recipes/lite_ppo.yaml"], [0, 1], grid_overrides=["model.lr=1e-5,1e-6"])
    >>> [p.label for p in points]  # doctest: +NORMALIZE_WHITESPACE
    ['lite_ppo_model.lr=1e-5_seed0', 'lite_ppo_model.lr=1e-6_seed0',
     'lite_ppo_model.lr=1e-5_seed1', 'lite_ppo_model.lr=1e-6_seed1']
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from lite_ppo.errors import UserError
from lite_ppo.research.factors import cell_config, parse_factor

__all__ = ["FIT_ENTRY", "FIT_PRELOAD", "GridPoint", "expand_grid", "parse_axis"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._+=-]+")


@dataclass(frozen=True)
class GridPoint:
    """One run of a sweep."""

    recipe: str  # the recipe YAML
    seed: int
    configs: tuple[str, ...] = ()  # common configs, then this point's config-axis values
    overrides: tuple[str, ...] = ()  # ``--key=value`` arguments, common ones first
    variant: str = ""  # the config/override axis values, as a folder name ("" without axes)
    extra: tuple[str, ...] = field(default=(), compare=False)
    cell: tuple[tuple[str, str], ...] = ()  # (factor, level) of a factorial sweep
    design: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (factor, levels) of the whole sweep

    @property
    def sweep_key(self) -> str:
        key = {"recipe": self.recipe, "configs": self.configs, "overrides": self.overrides, "seed": self.seed}
        if self.cell:  # only then, so the keys of sweeps without factors stay what they were
            key["cell"] = self.cell
        content = json.dumps(key, sort_keys=True)
        return hashlib.sha1(content.encode()).hexdigest()[:16]

    @property
    def label(self) -> str:
        parts = [Path(self.recipe).stem] + ([self.variant] if self.variant else []) + [f"seed{self.seed}"]
        return "_".join(parts)

    def save_dir(self, out: Path) -> Path:
        return out / self.variant if self.variant else out

    def fit_args(self, out: Path, ckpt_path: Path | None = None) -> list[str]:
        """The arguments after ``lite-ppo`` for this point
        (``fit --config ... --seed_everything=S --data.seed=S --rollout.seed=S ...``); with ``ckpt_path``,
        continuing that checkpoint's run in its folder."""
        args = ["fit", "--config", self.recipe]
        for config in self.configs:
            args += ["--config", config]
        # The seed picks the data order and the sampling too, not only torch's RNG (the rollout seeds its
        # own generators, and a pretrained policy has no random init): seeds before the overrides, so an
        # explicit --data.seed / --rollout.seed of the user still wins.
        args += [f"--seed_everything={self.seed}", f"--data.seed={self.seed}", f"--rollout.seed={self.seed}"]
        args += list(self.overrides)
        args += [
            f"--trainer.logger.init_args.save_dir={self.save_dir(out)}",
            f"--run_record.sweep_key={self.sweep_key}",
        ]
        if self.cell:
            args += [
                f"--run_record.cell={json.dumps(dict(self.cell))}",
                f"--run_record.factors={json.dumps({name: list(levels) for name, levels in self.design})}",
            ]
        if ckpt_path is not None:
            args.append(f"--ckpt_path={ckpt_path}")
        return args

    def command(self, out: Path, python: str | None = None, ckpt_path: Path | None = None) -> list[str]:
        """The full command line: a separate Python process running the ``lite-ppo`` CLI."""
        return [python or sys.executable, "-m", "lite_ppo.cli", *self.fit_args(out, ckpt_path)]


def run_env(threads: int | None) -> dict[str, str] | None:
    """The environment of a run with ``threads`` math threads (this one's, with the math libraries' thread
    count set); None when ``threads`` is None (inherited)."""
    if threads is None:
        return None
    return {**os.environ, **dict.fromkeys(("OMP_NUM_THREADS", "MKL_NUM_THREADS"), str(threads))}


# The same run started by the sweep's fork server (lite_ppo.research.fork_server): the function that
# `python -m lite_ppo.cli` calls, and what a testbed `fit` imports before its first step (sys.modules after
# a 1-step fit, less those before it), imported once by the server instead of by every run.
FIT_ENTRY = "lite_ppo.cli.commands:main"
FIT_PRELOAD = (
    "lite_ppo.cli.commands",
    "lite_ppo.cli.lightning_cli",
    "lite_ppo.cli.tensorboard_logger",
    "torch.utils.tensorboard",
    "transformers.modeling_layers",
    "transformers.processing_utils",
)


def parse_axis(text: str) -> tuple[str, list[str]]:
    """``"model.lr=1e-5,1e-6"`` -> ``("model.lr", ["1e-5", "1e-6"])``."""
    key, sep, values = text.partition("=")
    items = [v.strip() for v in values.split(",") if v.strip()]
    if not sep or not key.strip() or not items:
        raise UserError(f"--grid {text!r}: expected KEY=V1,V2,... (e.g. model.lr=1e-5,1e-6)")
    return key.strip().lstrip("-"), items


def expand_grid(
    recipes: list[str],
    seeds: list[int],
    configs: list[str] | None = None,
    grid_configs: list[str] | None = None,
    grid_overrides: list[str] | None = None,
    overrides: list[str] | None = None,
    factors: list[str] | None = None,
) -> list[GridPoint]:
    """Every combination, seed by seed: for each seed, recipe-major then variants (see the module's note).

    ``configs``/``overrides`` apply to every run; each ``factors`` entry
    (``NAME=LEVEL:FRAGMENT.yaml,...``), each ``grid_configs`` entry (``a.yaml,b.yaml``) and each
    ``grid_overrides`` entry (``KEY=V1,V2``) is one more axis of the grid.
    """
    if not recipes:
        raise UserError("lite-ppo sweep: give at least one --recipe")
    if not seeds:
        raise UserError("lite-ppo sweep: give at least one --seed")
    for path in [*recipes, *(configs or [])] + [c for axis in (grid_configs or []) for c in axis.split(",") if c]:
        if not Path(path).is_file():
            raise UserError(f"config file {path!r} does not exist")
    parsed = [parse_factor(text) for text in factors or []]
    if len({f.name for f in parsed}) != len(parsed):
        raise UserError("lite-ppo sweep: two --factor options share a name")
    design = tuple((f.name, tuple(f.level_names)) for f in parsed)
    axes: list[list[tuple[str, str | None, str | None]]] = []  # per axis: (slug, config, override)
    for axis in grid_configs or []:
        axes.append([(Path(c).stem, c, None) for c in axis.split(",") if c])
    for axis in grid_overrides or []:
        key, values = parse_axis(axis)
        axes.append([(f"{key}={v}", None, f"--{key}={v}") for v in values])
    common_overrides = tuple(overrides or [])
    cells = []  # (recipe, configs, overrides, variant, cell): one per grid point of a seed
    for recipe in recipes:
        for cell in itertools.product(*(f.levels for f in parsed)):
            for combo in itertools.product(*axes) if axes else [()]:
                slugs = [f"{f.name}={level.name}" for f, level in zip(parsed, cell)] + [slug for slug, _, _ in combo]
                variant = "_".join(_UNSAFE.sub("_", slug) for slug in slugs)
                point_configs = tuple(configs or []) + tuple(c for _, c, _ in combo if c)
                fragments = [level.fragment for level in cell if level.fragment]
                merged = cell_config([recipe, *point_configs], fragments) if fragments else {}
                if merged:  # inline JSON: LightningCLI's --config takes a file or the config itself
                    point_configs += (json.dumps(merged, sort_keys=True),)
                point_overrides = common_overrides + tuple(o for _, _, o in combo if o)
                named = tuple((f.name, level.name) for f, level in zip(parsed, cell))
                cells.append((recipe, point_configs, point_overrides, variant, named))
    return [
        GridPoint(recipe, int(seed), point_configs, point_overrides, variant, cell=named, design=design)
        for seed in seeds
        for recipe, point_configs, point_overrides, variant, named in cells
    ]
