"""Checkpoint files that are whole or refused: atomic writes, a SHA-256 beside each file, checks on save and load.

Lightning's ``TorchCheckpointIO`` serialises the whole checkpoint into memory and writes it in
place; a ``PermissionError`` during the write is swallowed (the run goes on without a checkpoint),
a kill during the write leaves a torn file, and ``torch.load`` of a damaged file fails late or not
at all. :class:`VerifiedCheckpointIO` keeps Lightning's interface and replaces the file handling:

- **atomic**: the checkpoint streams into ``.<name>.tmp-<pid>`` in the target folder (same file
  system, so the final ``os.replace`` is atomic), is fsync'ed, then renamed over the target; the
  folder is fsync'ed so the rename survives a power cut. A kill at any moment leaves either the
  previous file or the new one, never a torn one;
- **checksum**: the SHA-256 of the bytes written is recorded in ``<name>.sha256`` (``sha256sum``
  format: ``sha256sum -c last.ckpt.sha256`` checks it by hand);
- **verified after save**: the file exists, is a complete zip archive and its header (the pickled
  dict without tensor data) loads; a failed write or check raises :class:`CheckpointSaveError`
  (never swallowed: the run stops with a non-zero exit, the previous checkpoint is untouched);
- **verified on load** (``--ckpt_path``): empty, truncated or checksum-mismatched files raise
  :class:`CheckpointCorruptError`, one line naming the file, what is wrong and the newest good
  checkpoint in the same folder.

Remote paths (``s3://`` ...) fall back to Lightning's own handling. DeepSpeed ZeRO-3 checkpoints are
folders written by DeepSpeed itself and do not pass through a ``CheckpointIO``.

Example::

    trainer = Trainer(plugins=[VerifiedCheckpointIO()])  # the lite-ppo CLI installs it by default
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from lite_ppo.errors import UserError

CHECKSUM_SUFFIX = ".sha256"
_CHUNK = 1 << 22


class CheckpointSaveError(UserError):
    """A checkpoint could not be written or did not read back (disk full, folder not writable)."""


class CheckpointCorruptError(UserError):
    """A checkpoint file is empty, truncated or does not match its recorded checksum."""


def checksum_path(path: str | os.PathLike) -> Path:
    """``<checkpoint>.sha256`` beside the real file (a ``last.ckpt`` symlink resolves to its target)."""
    real = Path(os.path.realpath(path))
    return real.with_name(real.name + CHECKSUM_SUFFIX)


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def checkpoint_problem(path: str | os.PathLike, check_sum: bool = True) -> str | None:
    """What is wrong with a checkpoint file, in a few words, or None when it is whole.

    Order of checks: exists, not empty, SHA-256 equal to the recorded one (when recorded and
    ``check_sum``), a complete zip archive (``torch.save``'s format) with its header record.
    """
    path = Path(path)
    if not path.is_file():
        return "does not exist" if not path.exists() else "is not a file"
    size = path.stat().st_size
    if size == 0:
        return "is empty (0 bytes; the write was interrupted)"
    if check_sum:
        sidecar = checksum_path(path)
        if sidecar.is_file():
            recorded = sidecar.read_text().split()[:1]
            if recorded and recorded[0] != file_sha256(path):
                what = (
                    "is corrupt (bytes changed after it was written"
                    if _zip_problem(path) is None
                    else f"is truncated or damaged ({size} bytes"
                )
                return f"{what}; its SHA-256 differs from the one recorded in {sidecar.name})"
    problem = _zip_problem(path)
    return None if problem is None else f"{problem} ({size} bytes)"


def _zip_problem(path: Path) -> str | None:
    try:
        with zipfile.ZipFile(path) as archive:
            if not any(name.endswith("data.pkl") for name in archive.namelist()):
                return "is not a torch checkpoint (no data.pkl record)"
    except (zipfile.BadZipFile, OSError, EOFError):
        return "is truncated or not a torch checkpoint (no complete zip directory)"
    return None


def _step_of(path: Path) -> int:
    match = re.search(r"step=(\d+)", path.name)
    return int(match.group(1)) if match else -1


def previous_good_checkpoint(bad: str | os.PathLike) -> Path | None:
    """The newest other ``*.ckpt`` in ``bad``'s folder that passes :func:`checkpoint_problem`.

    Newest = highest ``step=N`` in the name, then modification time; a ``last.ckpt`` that is a
    link to the bad file is skipped.
    """
    bad = Path(bad)
    bad_real = os.path.realpath(bad)
    candidates = [p for p in bad.parent.glob("*.ckpt") if os.path.realpath(p) != bad_real and p.is_file()]
    candidates.sort(key=lambda p: (_step_of(p), p.stat().st_mtime), reverse=True)
    return next((p for p in candidates if checkpoint_problem(p) is None), None)


def corrupt_checkpoint_message(path: str | os.PathLike, problem: str) -> str:
    good = previous_good_checkpoint(path)
    hint = (
        f"the newest good checkpoint beside it is {good}: resume with --ckpt_path {good}"
        if good
        else f"no other good checkpoint in {Path(path).parent}"
    )
    return f"checkpoint {path} {problem}; {hint}"


class _HashingWriter:
    """A write-only file object that hashes what passes through it (``torch.save`` streams into it)."""

    def __init__(self, raw) -> None:
        self.raw = raw
        self.digest = hashlib.sha256()

    def write(self, data) -> int:
        self.digest.update(data)
        return self.raw.write(data)

    def flush(self) -> None:
        self.raw.flush()


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # not supported on every platform / file system; the rename itself is atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """``path`` holds ``data`` or what it held before, never part of it, also after a kill or a full
    disk (a temporary file beside it, synced, then renamed over it; removed when the write fails)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _os_error_in(err: BaseException | None) -> OSError | None:
    while err is not None:
        if isinstance(err, OSError):
            return err
        err = err.__cause__ or err.__context__
    return None


def _is_local(path: Any) -> bool:
    return "://" not in str(path) or str(path).startswith("file://")


class VerifiedCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` with atomic writes, a SHA-256 sidecar and checks after save and on load.

    Args:
        verify_on_load: check size, checksum and archive before loading (reads the file once more).
    """

    def __init__(self, verify_on_load: bool = True) -> None:
        super().__init__()
        self.verify_on_load = verify_on_load

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None or not _is_local(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        path = Path(str(path).removeprefix("file://"))
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as raw:
                writer = _HashingWriter(raw)
                torch.save(checkpoint, writer)
                raw.flush()
                os.fsync(raw.fileno())
            sidecar = checksum_path(path) if not path.is_symlink() else path.with_name(path.name + CHECKSUM_SUFFIX)
            # Drop the old checksum first: a kill between the two renames leaves a checkpoint
            # without a checksum (loaded with a warning), never a good file with a stale checksum.
            sidecar.unlink(missing_ok=True)
            if path.is_symlink():  # save_last="link" made it a link earlier; replace the link, not its target
                path.unlink()
            os.replace(tmp, path)
            atomic_write_bytes(sidecar, f"{writer.digest.hexdigest()}  {path.name}\n".encode())
            _fsync_folder(path.parent)
        except BaseException as err:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            if not isinstance(err, Exception):  # KeyboardInterrupt and the like: only clean up
                raise
            # torch.save re-raises a failed write (disk full, EACCES) as a RuntimeError; name the cause.
            cause = _os_error_in(err)
            reason = (cause.strerror or str(cause)) if cause is not None else f"{type(err).__name__}: {err}"
            raise CheckpointSaveError(
                f"checkpoint {path} could not be written: {reason}; the "
                f"previous checkpoints in {path.parent} are untouched"
            ) from err
        problem = checkpoint_problem(path, check_sum=False) or self._header_problem(path)
        if problem:
            raise CheckpointSaveError(f"checkpoint {path} {problem} right after saving it (the file system lost data?)")

    @staticmethod
    def _header_problem(path: Path) -> str | None:
        """Load the pickled header without reading tensor data (memory-mapped)."""
        try:
            header = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
        except Exception as err:  # noqa: BLE001 - any failure means the file does not read back
            return f"does not load ({type(err).__name__}: {err})"
        if not isinstance(header, dict):
            return f"does not hold a checkpoint dict (got {type(header).__name__})"
        return None

    def load_checkpoint(
        self, path, map_location: Callable | None = lambda storage, loc: storage, weights_only: bool | None = None
    ) -> dict[str, Any]:
        if self.verify_on_load and _is_local(path):
            local = Path(str(path).removeprefix("file://"))
            problem = checkpoint_problem(local)
            if problem:
                raise CheckpointCorruptError(corrupt_checkpoint_message(path, problem))
            if not checksum_path(local).is_file():
                warnings.warn(
                    f"checkpoint {path} has no recorded checksum ({checksum_path(local).name}); loading it unchecked",
                    stacklevel=2,
                )
        return super().load_checkpoint(path, map_location=map_location, weights_only=weights_only)

    def remove_checkpoint(self, path) -> None:
        super().remove_checkpoint(path)
        if _is_local(path):
            Path(str(path).removeprefix("file://") + CHECKSUM_SUFFIX).unlink(missing_ok=True)
