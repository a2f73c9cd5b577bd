"""Files users rely on are replaced whole: a write that fails part-way (a kill, a full disk) leaves the
file as it was, and no temporary file beside it."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import signal

import pytest

from helpers.paths import REPO
from lite_ppo.evaluation.report import write_jsonl
from lite_ppo.reliability.checkpoint_io import atomic_write_bytes


def test_a_failed_atomic_write_keeps_the_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "run.json"
    atomic_write_bytes(path, b'{"status": "finished"}\n')

    def full_disk(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        atomic_write_bytes(path, b'{"status": "running"}\n')
    assert path.read_bytes() == b'{"status": "finished"}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_responses_written_again_keep_the_earlier_file_when_the_writing_stops(tmp_path):
    """evaluate into the same --out: the records stop coming part-way (here an error; a kill alike), and
    responses.jsonl still holds the complete earlier evaluation, not its first lines truncated."""
    path = tmp_path / "responses.jsonl"
    earlier = [{"id": str(i), "correct": True} for i in range(3)]
    write_jsonl(path, earlier)

    def interrupted():
        yield {"id": "0", "correct": False}
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_jsonl(path, interrupted())
    assert [json.loads(line) for line in path.read_text().splitlines()] == earlier
    assert [p.name for p in tmp_path.iterdir()] == ["responses.jsonl"]


def _saver(cls, tmp_path):
    from types import SimpleNamespace

    from jsonargparse import ArgumentParser

    parser = ArgumentParser()
    parser.add_argument("--lr", type=float)
    saver = cls(parser, parser.parse_args(["--lr", "0.1"]), overwrite=True)
    trainer = SimpleNamespace(
        log_dir=str(tmp_path), is_global_zero=True, strategy=SimpleNamespace(broadcast=lambda v: v)
    )
    return saver, parser, trainer


def test_the_run_config_written_again_stays_whole_when_the_writing_stops(tmp_path, monkeypatch):
    """A resume writes config.yaml again into the run folder: stopped part-way (here the YAML dump fails;
    a kill or a full disk alike), the folder keeps the complete earlier config (Lightning's own
    SaveConfigCallback has opened, and so emptied, the file by then)."""
    import yaml

    from lite_ppo.cli.save_config import AtomicSaveConfig

    saver, _, trainer = _saver(AtomicSaveConfig, tmp_path)
    saver.setup(trainer, None, "fit")
    assert yaml.safe_load((tmp_path / "config.yaml").read_text()) == {"lr": 0.1}

    again, parser, trainer = _saver(AtomicSaveConfig, tmp_path)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(parser, "dump", killed)
    with pytest.raises(KeyboardInterrupt):
        again.setup(trainer, None, "fit")
    assert yaml.safe_load((tmp_path / "config.yaml").read_text()) == {"lr": 0.1}
    assert [p.name for p in tmp_path.iterdir()] == ["config.yaml"]


@contextlib.contextmanager
def full_disk_after(limit: int):
    """Writes beyond ``limit`` bytes of a file fail with EFBIG, as a disk that fills up mid-write would
    (RLIMIT_FSIZE; SIGXFSZ ignored so that the write fails rather than killing the process)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


def test_compare_written_again_keeps_its_earlier_outputs_when_the_disk_fills(tmp_path):
    """`lite-ppo compare --out` into the folder of an earlier comparison, and the disk fills while it writes
    (a kill alike): the earlier figures and summaries stay whole, and no temporary file is left beside them."""
    from helpers.compare_runs import RUNS, write_run
    from lite_ppo.research.compare import main as compare_main

    root = tmp_path / "runs"
    for recipe, seeds in RUNS.items():
        for seed, (steps, final, offset) in seeds.items():
            write_run(root, recipe, seed, steps, final, offset, clip=recipe == "alpha")
    out = tmp_path / "cmp"
    assert compare_main([str(root), "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert {"overview.png", "summary.json", "summary.md"} <= set(before)
    with full_disk_after(200), pytest.raises(OSError):
        compare_main([str(root), "--out", str(out), "--band", "std"])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_slurm_scripts_written_again_stay_whole_when_the_disk_fills(tmp_path):
    """`sweep --emit-slurm` into the folder of earlier scripts (which a queued array job reads when it
    starts), and the disk fills part-way: every script is still the earlier one, whole and executable."""
    from lite_ppo.research.grid import expand_grid
    from lite_ppo.research.slurm import emit_slurm

    points = expand_grid(
        [str(REPO / "configs/recipes/lite_ppo.yaml")], [0, 1], [str(REPO / "configs/models/tiny.yaml")]
    )
    out = tmp_path / "slurm"
    paths = emit_slurm(points, out, tmp_path / "runs")
    before = {p.name: p.read_bytes() for p in paths}
    assert min(map(len, before.values())) > 200
    with full_disk_after(200), pytest.raises(OSError):
        emit_slurm(points, out, tmp_path / "other_runs")
    for path in paths:
        assert path.read_bytes() == before[path.name]
        assert os.access(path, os.X_OK)
    assert sorted(p.name for p in out.iterdir()) == sorted(before)
