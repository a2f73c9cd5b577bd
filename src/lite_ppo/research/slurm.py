"""SLURM launch scripts for a sweep: one bash script per run plus one array job that runs them.

No scheduler of our own: SLURM's job array does the scheduling (``sbatch DIR/sweep.sbatch``), each
task runs one grid point in its own process and named run directory, and ``lite-ppo compare``
afterwards reads the results.

Example:
    >>> emit_slurm(points, Path("slurm"), Path("runs/sweep"), ["--gres=gpu:8", "--time=48:00:00"])  # doctest: +SKIP
"""

from __future__ import annotations

import shlex
from pathlib import Path

from lite_ppo.research.grid import GridPoint

__all__ = ["ARRAY_SCRIPT", "emit_slurm"]

ARRAY_SCRIPT = "sweep.sbatch"


def emit_slurm(
    points: list[GridPoint],
    out_dir: Path,
    runs_root: Path,
    sbatch_options: list[str] | None = None,
    python: str | None = None,
    workdir: Path | None = None,
) -> list[Path]:
    """Write ``NNN_<label>.sh`` per point and ``sweep.sbatch`` (an array over them); return all paths,
    array script last."""
    out_dir.mkdir(parents=True, exist_ok=True)
    workdir = (workdir or Path.cwd()).resolve()
    scripts = []
    for i, point in enumerate(points):
        path = out_dir / f"{i:03d}_{point.label}.sh"
        command = shlex.join(point.command(runs_root, python))
        _write_script(
            path,
            "#!/usr/bin/env bash\n"
            f"# lite-ppo sweep run {i}: recipe={point.recipe} seed={point.seed}"
            + (f" variant={point.variant}" if point.variant else "")
            + f" sweep_key={point.sweep_key}\n"
            "set -euo pipefail\n"
            f"cd {shlex.quote(str(workdir))}\n"
            f"exec {command}\n",
        )
        scripts.append(path)
    options = "".join(f"#SBATCH {opt}\n" for opt in (sbatch_options or []))
    names = " ".join(shlex.quote(p.name) for p in scripts)
    array = out_dir / ARRAY_SCRIPT
    _write_script(
        array,
        "#!/usr/bin/env bash\n"
        "#SBATCH --job-name=lite-ppo-sweep\n"
        f"#SBATCH --array=0-{len(scripts) - 1}\n"
        f"#SBATCH --output={shlex.quote(str(out_dir.resolve()))}/%A_%a.log\n"
        f"{options}"
        "set -euo pipefail\n"
        f"scripts=({names})\n"
        f'exec bash {shlex.quote(str(out_dir.resolve()))}/"${{scripts[$SLURM_ARRAY_TASK_ID]}}"\n',
    )
    return [*scripts, array]


def _write_script(path: Path, text: str) -> None:
    """Replace ``path`` whole (a job that starts while the sweep rewrites its scripts reads the old or the new
    one, never part of one), executable."""
    # Imported here: checkpoint_io brings torch and Lightning, which `sweep --help` need not load.
    from lite_ppo.reliability.checkpoint_io import atomic_write_bytes

    atomic_write_bytes(path, text.encode())
    path.chmod(0o755)
