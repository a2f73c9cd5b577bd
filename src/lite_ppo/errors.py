"""The one exception type for mistakes a user can fix (a config value, a path, a data file).

The ``lite-ppo`` command prints a :class:`UserError` as one line (``lite-ppo: error: ...``) and exits
with status 2, without a traceback (``LITE_PPO_DEBUG=1`` or ``--debug`` shows it). Raise it with a
message that names the file/line/field or the option and says what is allowed.

Example:
    >>> raise UserError("data.sources.easy: file 'x.jsonl' does not exist")  # doctest: +SKIP
"""

from __future__ import annotations

__all__ = ["UserError"]


class UserError(ValueError):
    """A mistake in the user's input; the message is the whole story (one line, no traceback)."""
