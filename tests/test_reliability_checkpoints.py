"""Checkpoint integrity: atomic writes, checksums, damaged files refused with a named alternative,
unwritable folders refused at start, failed saves never swallowed."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import torch

from lite_ppo.errors import UserError
from lite_ppo.reliability.checkpoint_integrity import ensure_writable
from lite_ppo.reliability.checkpoint_io import (
    CheckpointCorruptError,
    CheckpointSaveError,
    VerifiedCheckpointIO,
    checkpoint_problem,
)


def _checkpoint(step: int) -> dict:
    generator = torch.Generator().manual_seed(step)
    return {"global_step": step, "state_dict": {"w": torch.randn(256, 256, generator=generator)}}


def _save_series(folder: Path, steps=(2, 4)) -> VerifiedCheckpointIO:
    io = VerifiedCheckpointIO()
    for step in steps:
        io.save_checkpoint(_checkpoint(step), folder / f"epoch=0-step={step}.ckpt")
    io.save_checkpoint(_checkpoint(steps[-1]), folder / "last.ckpt")
    return io


def test_save_is_atomic_with_a_matching_sha256_and_loads_back(tmp_path):
    io = VerifiedCheckpointIO()
    path = tmp_path / "sub" / "last.ckpt"
    io.save_checkpoint(_checkpoint(3), path)
    recorded, name = (tmp_path / "sub" / "last.ckpt.sha256").read_text().split()
    assert name == "last.ckpt"
    assert recorded == hashlib.sha256(path.read_bytes()).hexdigest()  # sha256sum -c format, independent hash
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.ckpt", "last.ckpt.sha256"]  # no temp file left
    loaded = io.load_checkpoint(path)
    assert loaded["global_step"] == 3 and torch.equal(loaded["state_dict"]["w"], _checkpoint(3)["state_dict"]["w"])


def test_interrupted_write_leaves_the_previous_checkpoint_whole(tmp_path, monkeypatch):
    io = VerifiedCheckpointIO()
    path = tmp_path / "last.ckpt"
    io.save_checkpoint(_checkpoint(1), path)
    before = path.read_bytes()

    # The process dies in the middle of streaming the new checkpoint (what a kill during the write does).
    from lite_ppo.reliability import checkpoint_io

    written = {"n": 0}
    original = checkpoint_io._HashingWriter.write

    def dying_write(self, data):
        written["n"] += len(data)
        if written["n"] > 100_000:
            raise KeyboardInterrupt("killed mid-write")
        return original(self, data)

    monkeypatch.setattr(checkpoint_io._HashingWriter, "write", dying_write)
    with pytest.raises(BaseException, match="killed mid-write|unexpected pos"):
        io.save_checkpoint(_checkpoint(2), path)
    monkeypatch.undo()
    assert path.read_bytes() == before  # never torn: the old file until the rename
    assert checkpoint_problem(path) is None
    assert io.load_checkpoint(path)["global_step"] == 1


@pytest.mark.parametrize(
    "damage, expected",
    [
        ("empty", "is empty"),
        ("truncated", "is truncated"),
        ("flipped", "is corrupt"),
    ],
)
def test_damaged_checkpoint_is_refused_naming_the_previous_good_one(tmp_path, damage, expected):
    io = _save_series(tmp_path)
    last = tmp_path / "last.ckpt"
    data = bytearray(last.read_bytes())
    if damage == "empty":
        data = bytearray()
    elif damage == "truncated":
        data = data[: len(data) // 2]
    else:  # flip bytes inside the tensor data: the archive stays readable, only the checksum can tell
        middle = len(data) // 2
        data[middle : middle + 8] = bytes(b ^ 0xFF for b in data[middle : middle + 8])
    last.write_bytes(bytes(data))

    with pytest.raises(CheckpointCorruptError) as info:
        io.load_checkpoint(last)
    message = str(info.value)
    assert "\n" not in message
    assert str(last) in message and expected in message
    good = tmp_path / "epoch=0-step=4.ckpt"
    assert f"--ckpt_path {good}" in message  # the newest good one, not step 2
    assert io.load_checkpoint(good)["global_step"] == 4  # and it is usable
    assert isinstance(info.value, UserError)


def test_flipped_bytes_load_silently_without_the_check(tmp_path):
    """What the checksum protects against: plain torch.load accepts the damaged file."""
    io = _save_series(tmp_path, steps=(2,))
    last = tmp_path / "last.ckpt"
    data = bytearray(last.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 8] = bytes(b ^ 0xFF for b in data[middle : middle + 8])
    last.write_bytes(bytes(data))
    silently = torch.load(last, weights_only=False)["state_dict"]["w"]
    assert not torch.equal(silently, _checkpoint(2)["state_dict"]["w"])
    with pytest.raises(CheckpointCorruptError):
        io.load_checkpoint(last)


def test_no_good_checkpoint_left_says_so(tmp_path):
    io = _save_series(tmp_path, steps=(2,))
    for p in tmp_path.glob("*.ckpt"):
        p.write_bytes(b"")
    with pytest.raises(CheckpointCorruptError, match="no other good checkpoint"):
        io.load_checkpoint(tmp_path / "last.ckpt")


def test_disk_full_during_the_write_is_a_save_error(tmp_path, monkeypatch):
    io = VerifiedCheckpointIO()
    path = tmp_path / "last.ckpt"
    io.save_checkpoint(_checkpoint(1), path)
    from lite_ppo.reliability import checkpoint_io

    def full(self, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint_io._HashingWriter, "write", full)
    with pytest.raises(CheckpointSaveError, match="No space left on device"):
        io.save_checkpoint(_checkpoint(2), path)
    monkeypatch.undo()
    assert io.load_checkpoint(path)["global_step"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt", "last.ckpt.sha256"]


def test_failed_save_raises_and_keeps_the_previous_file(tmp_path):
    io = VerifiedCheckpointIO()
    folder = tmp_path / "ckpt"
    io.save_checkpoint(_checkpoint(1), folder / "last.ckpt")
    # The folder becomes unusable mid-run (moved away, a file in its place): every write fails.
    folder.rename(tmp_path / "moved")
    folder.write_text("not a folder")
    with pytest.raises(CheckpointSaveError, match="could not be written"):
        io.save_checkpoint(_checkpoint(2), folder / "last.ckpt")
    assert io.load_checkpoint(tmp_path / "moved" / "last.ckpt")["global_step"] == 1


def test_unwritable_folder_is_a_one_line_user_error(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(UserError) as info:
        ensure_writable(blocker / "ckpt")
    assert str(blocker / "ckpt") in str(info.value) and "not writable" in str(info.value)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_folder_is_refused(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(UserError, match="not writable"):
            ensure_writable(folder)
        with pytest.raises(CheckpointSaveError):
            VerifiedCheckpointIO().save_checkpoint(_checkpoint(1), folder / "last.ckpt")
    finally:
        folder.chmod(0o755)


# ---------------------------------------------------------------- through the CLI, on the tiny model
def _fit(tmp: Path, ckpt_dir: Path, *callbacks: dict) -> None:
    from helpers.reliability_faults import fit_with_faults

    fit_with_faults(tmp, ckpt_dir, list(callbacks))


@pytest.mark.slow
def test_fit_refuses_an_unwritable_checkpoint_folder_before_training(tmp_path, tiny_model_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(SystemExit) as info:
        _fit(
            tmp_path,
            blocker / "ckpt",
            {
                "class_path": "helpers.reliability_faults.StepMarker",
                "init_args": {"path": str(tmp_path / "steps_done")},
            },
        )
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"lite-ppo fit: error: checkpoint folder {blocker / 'ckpt'} is not writable (Not a "
        "directory); choose another with the ModelCheckpoint dirpath or trainer.default_root_dir"
    )
    assert not (tmp_path / "steps_done").exists()  # no training step ran


@pytest.mark.slow
def test_folder_turning_read_only_mid_run_stops_the_run(tmp_path, tiny_model_path, capsys):
    ckpt = tmp_path / "ckpt"
    with pytest.raises(SystemExit) as info:
        _fit(
            tmp_path,
            ckpt,
            {"class_path": "helpers.reliability_faults.DenyWritesAfter", "init_args": {"folder": str(ckpt), "step": 1}},
        )
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(
        f"lite-ppo fit: error: checkpoint {ckpt}/epoch=0-step=4.ckpt could not be written: Permission denied"
    ), err
    # The checkpoint of step 2 (written before the folder turned read-only) is whole and loads.
    assert VerifiedCheckpointIO().load_checkpoint(ckpt / "epoch=0-step=2.ckpt")["global_step"] == 2
    assert sorted(p.name for p in ckpt.iterdir()) == [
        "epoch=0-step=2.ckpt",
        "epoch=0-step=2.ckpt.sha256",
        "last.ckpt",
        "last.ckpt.sha256",
    ]


@pytest.mark.slow
def test_the_whole_run_folder_turning_read_only_is_one_line_per_writer(tmp_path, tiny_model_path, capsys):
    """The filesystem under the logger's folder (event file, run.json) refuses writes from the first step's
    end: TensorBoard's writer thread, the run record and the step say it in one line each, no traceback."""
    ckpt = tmp_path / "ckpt"
    fault = {"class_path": "helpers.reliability_faults.DenyWritesAfter", "init_args": {"folder": str(tmp_path / "tb")}}
    with pytest.raises(SystemExit) as info:
        _fit(tmp_path, ckpt, {**fault, "init_args": {**fault["init_args"], "step": 0}})
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Exception in thread" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("lite-ppo fit: error: cannot access ") and "Permission denied" in last, last


def test_a_refused_write_is_a_user_error_wherever_it_is_wrapped(capsys):
    import errno
    import threading

    from lite_ppo.cli.commands import quiet_storage_errors_in_threads, user_error_message

    try:
        try:
            raise OSError(errno.EROFS, "Read-only file system", b"/runs/x/events.out")
        except OSError as error:
            raise ValueError("you tried to log 0.5 which is currently not supported") from error
    except ValueError as wrapped:
        message = user_error_message(wrapped)
    assert message.startswith("cannot write '/runs/x/events.out': Read-only file system"), message
    assert user_error_message(OSError(errno.ENOENT, "No such file or directory", "x")) is None  # a bug: traceback

    previous = threading.excepthook
    try:
        quiet_storage_errors_in_threads()

        def writer():
            raise OSError(errno.ENOSPC, "No space left on device", "/runs/x/events.out")

        thread = threading.Thread(target=writer)
        thread.start()
        thread.join()
    finally:
        threading.excepthook = previous
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "lite-ppo: warning: cannot write '/runs/x/events.out': No space left on device (in a background writer)"
    ]


def test_removing_a_checkpoint_removes_its_checksum(tmp_path):
    """ModelCheckpoint(save_top_k=K, monitor="step", mode="max") deletes old checkpoints through the IO."""
    io = _save_series(tmp_path, steps=(2, 4))
    io.remove_checkpoint(tmp_path / "epoch=0-step=2.ckpt")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "epoch=0-step=4.ckpt",
        "epoch=0-step=4.ckpt.sha256",
        "last.ckpt",
        "last.ckpt.sha256",
    ]


@pytest.mark.slow
def test_fit_refuses_a_torn_ckpt_path_and_names_the_good_one(tmp_path, tiny_model_path, capsys):
    from helpers.paths import REPO
    from lite_ppo.cli.commands import main

    ckpt = tmp_path / "ckpt"
    _fit(tmp_path, ckpt)  # 3 rollout steps: step=2, 4, 6 and last.ckpt
    last = ckpt / "last.ckpt"
    last.write_bytes(last.read_bytes()[:1000])  # torn by a kill during a plain (non-atomic) write
    resume = [
        "fit",
        "--config",
        str(REPO / "configs/recipes/lite_ppo.yaml"),
        "--config",
        str(REPO / "configs/models/tiny.yaml"),
        "--config",
        str(tmp_path / "faults.yaml"),
        "--trainer.default_root_dir",
        str(tmp_path),
        "--trainer.logger.init_args.save_dir",
        str(tmp_path / "tb"),
    ]
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main([*resume, f"--ckpt_path={last}"])
    assert info.value.code == 2
    good = ckpt / "epoch=0-step=6.ckpt"
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"lite-ppo fit: error: checkpoint {last} is truncated or damaged (1000 bytes; "
        "its SHA-256 differs from the one recorded in last.ckpt.sha256); the "
        f"newest good checkpoint beside it is {good}: resume with --ckpt_path {good}"
    )
    main([*resume, f"--ckpt_path={good}"])  # the named one resumes (at the end of the run: nothing left to do)
