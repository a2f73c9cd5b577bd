"""RunDir (lite_ppo.research.run_folder): the one definition of a run folder that the CLI's checkpoint
lookup, the run record, compare and sweep share; checked on hand-built folders."""

from __future__ import annotations

import json
from pathlib import Path

from lite_ppo.research.run_folder import RunDir
from lite_ppo.research.run_naming import run_folder_of
from lite_ppo.research.run_record import read_run_record
from lite_ppo.research.runs import find_runs


def _run(path: Path, record: dict | None = None, config: str | None = None, events: bool = True) -> Path:
    path.mkdir(parents=True)
    if events:
        (path / "events.out.tfevents.1.host.1.0").write_bytes(b"")
    if record is not None:
        (path / "run.json").write_text(json.dumps(record))
    if config is not None:
        (path / "config.yaml").write_text(config)
    return path


def test_a_run_is_a_record_or_event_files_of_its_own(tmp_path):
    fit = _run(tmp_path / "lite_ppo/tiny/seed0", record={"seed": 0}, config="seed_everything: 0\n")
    plain = _run(tmp_path / "lightning_logs/version_0")  # a plain Lightning run: events only
    empty = tmp_path / "empty"
    empty.mkdir()
    assert RunDir.is_run(fit) and RunDir.is_run(plain) and not RunDir.is_run(empty)
    assert RunDir(fit).written_by_fit and not RunDir(plain).written_by_fit
    assert RunDir(fit).record == {"seed": 0} and RunDir(fit).config == {"seed_everything": 0}
    assert RunDir(plain).record is None and RunDir(plain).config is None
    assert [p.name for p in RunDir(fit).events] == ["events.out.tfevents.1.host.1.0"]


def test_a_runs_validate_logs_are_part_of_it_everywhere(tmp_path):
    run = _run(tmp_path / "runs/lite_ppo/tiny/seed0", record={"seed": 0})
    _run(run / "validate")  # `lite-ppo validate` of one of its checkpoints logs here
    other = _run(tmp_path / "runs/lite_ppo/tiny/seed1", record={"seed": 1})
    assert [r.path for r in RunDir.below(tmp_path / "runs")] == [run, other]
    assert sorted(r.path for r in find_runs([str(tmp_path / "runs")])) == [run.resolve(), other.resolve()]


def test_a_checkpoint_belongs_to_the_run_fit_wrote(tmp_path):
    run = _run(tmp_path / "seed0", record={"seed": 0})
    (run / "checkpoints").mkdir()
    ckpt = run / "checkpoints" / "last.ckpt"
    assert RunDir.of_checkpoint(ckpt) == RunDir(run.resolve()) and run_folder_of(ckpt) == run.resolve()
    # Event files alone (no record, no config.yaml) are not a run fit wrote: nothing to log beside.
    plain = _run(tmp_path / "version_0")
    assert RunDir.of_checkpoint(plain / "x.ckpt") is None and run_folder_of(None) is None


def test_an_unreadable_record_is_none_not_an_error(tmp_path):
    run = _run(tmp_path / "seed0")
    (run / "run.json").write_text("{not json")
    assert read_run_record(run) is None and RunDir(run).record is None
    (run / "run.json").write_text("[1, 2]")  # valid JSON, not a record
    assert RunDir(run).record is None


def test_an_unreadable_config_is_none_not_an_error(tmp_path):
    """A damaged earlier ``config.yaml`` must not stop ``fit`` (its namesake note reads it): every way of
    failing to read one is None. Bytes that are not UTF-8 and an impossible date raised before."""
    run = _run(tmp_path / "seed0")
    for content in (b"seed_everything: \xff\xfe\n", b"when: 2001-02-30\n", b"model: [unclosed\n", b"- a list\n"):
        (run / "config.yaml").write_bytes(content)
        assert RunDir(run).config is None, content
    (run / "config.yaml").write_bytes(b"seed_everything: 3\n")
    assert RunDir(run).config == {"seed_everything": 3}
