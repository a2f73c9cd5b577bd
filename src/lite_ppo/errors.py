"""The one exception type for mistakes a user can fix (a config value, a path, a data file).

The ``lite-ppo`` command prints a :class:`UserError` as one line (``lite-ppo: error: ...``) and exits
with status 2, without a traceback (``LITE_PPO_DEBUG=1`` or ``--debug`` shows it). Raise it with a
message that names the file/line/field or the option and says what is allowed.

Example:
    >>> raise UserError("data.sources.easy: file 'x.jsonl' does not exist")  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import errno
import os
import re

__all__ = [
    "OneLineParser",
    "UserError",
    "name_the_option",
    "one_line",
    "parser_message",
    "storage_error",
    "storage_message",
]

# A write the filesystem refused: nothing in the program is wrong, so one line says which file and why.
STORAGE_ERRNOS = frozenset({errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EACCES})


class UserError(ValueError):
    """A mistake in the user's input; the message is the whole story (one line, no traceback)."""


class MissingFileError(UserError, FileNotFoundError):
    """A file or folder the user named is not there, or not what it must be: one line like any
    :class:`UserError`, and still a ``FileNotFoundError`` to code that catches that."""


# jsonargparse's list of the forms a class-typed value may take, appended to a constructor's own error.
_ACCEPTED_FORMS = re.compile(r"\s*(Not a valid subclass of |a class path \(str\)|a dict with|a dict without)")


def storage_error(err: BaseException | None) -> OSError | None:
    """The ``OSError`` of a refused write (read-only filesystem, full disk, quota, permission) that
    ``err`` is or was raised from (its ``__cause__``/``__context__`` chain: Lightning wraps a logger's
    failed write in a ValueError), else None.

    Example:
        >>> storage_error(OSError(errno.EROFS, "Read-only file system", "/runs/x")).filename
        '/runs/x'
    """
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in STORAGE_ERRNOS:
            return err
        err = err.__cause__ or err.__context__
    return None


def storage_message(err: OSError) -> str:
    """``cannot write '<file>': Read-only file system`` (one line; ``cannot access`` for a permission)."""
    verb = "cannot access" if err.errno == errno.EACCES else "cannot write"
    where = f" {os.fsdecode(err.filename)!r}" if err.filename else ""
    return f"{verb}{where}: {err.strerror or err}"


def parser_message(message: str) -> str:
    """jsonargparse's multi-line message, made one line: ``Parser key "model.lr": Expected a <class
    'float'>. Got value: abc`` -> ``model.lr: expected float, got 'abc'``; of a union's errors, the
    specific ones (a constructor's "SamplingConfig.top_p must be in (0, 1], got 2.0") are kept."""
    errors = re.findall(r"^\s*- (.*)$", message, flags=re.MULTILINE)
    specific = [one_line(e) for e in errors if not e.startswith("Expected a ") and not _ACCEPTED_FORMS.match(e)]
    if specific:
        key = re.match(r'\s*Parser key "([^"]+)":', message)
        return (f"{key.group(1)}: " if key else "") + "; ".join(specific)
    text = one_line(message)
    text = re.sub(r'Parser key "([^"]+)":\s*', r"\1: ", text)
    text = re.sub(r"<class '([\w.]+)'>", r"\1", text)
    text = re.sub(
        r"Expected a (\S+?)\. Got value: (.*)$", lambda m: f"expected {m.group(1)}, got {m.group(2).strip()!r}", text
    )
    # A union (Optional[int], dict | None): "expected int or null, got 'x'" instead of one error per member.
    union = re.search(
        r"Does not validate against any of the Union subtypes Subtypes: \[(.*)\] Errors:.* Given value: (.*)$", text
    )
    if union:
        types = re.sub(r"\bNoneType\b", "null", union.group(1))
        types = re.sub(r",\s*(?![^\[]*\])", " or ", types)  # commas outside brackets
        text = f"{text[: union.start()]}expected {types}, got {union.group(2).strip()!r}"
    return text


def name_the_option(message: str, settings) -> str:
    """A constructor's ``Class.field ..., got V`` with ``Class.field`` replaced by the option(s) that
    hold ``V`` in ``settings`` (``(dotted key, value)`` pairs, e.g. a jsonargparse Namespace's items):
    ``SamplingConfig.temperature must be > 0, got 0.0`` -> ``rollout.sampling.temperature must be > 0,
    got 0.0``. Left as it is when no option matches (a callback in a list keeps its class name).

    Example:
        >>> name_the_option("SamplingConfig.top_p must be in (0, 1], got 2.0",
        ...                 [("rollout.sampling.top_p", 2.0), ("rollout.eval_sampling.top_p", 1.0)])
        'rollout.sampling.top_p must be in (0, 1], got 2.0'
    """
    match = re.match(r"([A-Z]\w*)\.(\w+) (.*), got (.+)$", message)
    if match is None:
        return message
    field, rest, got = match.group(2), match.group(3), match.group(4)
    keys = [key for key, value in settings if key.rsplit(".", 1)[-1] == field and str(value) == got]
    return f"{' and '.join(keys)} {rest}, got {got}" if keys else message


def one_line(message: str) -> str:
    """``message`` with every run of whitespace (newlines included) made one space."""
    return " ".join(message.split())


class OneLineParser(argparse.ArgumentParser):
    """The parser of the project's own subcommands: a bad option is one line naming it and where the
    options are listed (argparse's default prints the whole usage block first).

    Example:
        >>> OneLineParser(prog="lite-ppo evaluate").parse_args(["--limit"])  # doctest: +SKIP
        lite-ppo evaluate: error: unrecognized arguments: --limit (`lite-ppo evaluate --help` lists the options)
    """

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {one_line(message)} (`{self.prog} --help` lists the options)\n")
