"""``lite-ppo sweep --no-start-after WHEN``: the last moment a run of the sweep may start.

A study time-boxed to a session fixes its stop before any result is read; the sweep then starts no run
after that moment, lets the running ones finish and leaves the rest for the same command later. With
the grid's seed-by-seed order (``lite_ppo.research.grid``) the runs that finished are whole seeds but
for the last one started, which the same command completes later.

``WHEN`` is ``HH:MM`` (the next such time on this machine's clock: later today, else tomorrow), an ISO
date-time (``2026-12-07T01:00``, local time unless it names a zone) or a delay from now (``+90m``, ``+2h``).

Example:
    >>> from datetime import datetime
    >>> no_start_after("01:00", now=datetime(2026, 12, 6, 23, 20))
    datetime.datetime(2026, 12, 7, 1, 0)
    >>> no_start_after("+90m", now=datetime(2026, 12, 6, 23, 20))
    datetime.datetime(2026, 12, 7, 0, 50)
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from lite_ppo.errors import UserError

_CLOCK = re.compile(r"(\d{1,2}):(\d{2})")
_DELAY = re.compile(r"\+(\d+(?:\.\d+)?)([mh])")
ALLOWED = "HH:MM (the next such time), an ISO date-time (2026-12-07T01:00) or a delay (+90m, +2h)"


def no_start_after(text: str, now: datetime | None = None) -> datetime:
    """The moment ``text`` names, as a naive local datetime (or an aware one when ``text`` names a zone);
    a one-line :class:`UserError` saying what is allowed otherwise."""
    now = now or datetime.now()
    text = text.strip()
    if clock := _CLOCK.fullmatch(text):
        hour, minute = int(clock[1]), int(clock[2])
        if hour > 23 or minute > 59:
            raise UserError(f"--no-start-after {text!r}: not a time of day; give {ALLOWED}")
        moment = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
        return moment if moment > now else moment + timedelta(days=1)
    if delay := _DELAY.fullmatch(text):
        amount = float(delay[1])
        try:
            return now + (timedelta(hours=amount) if delay[2] == "h" else timedelta(minutes=amount))
        except OverflowError:  # past the calendar's year 9999
            raise UserError(f"--no-start-after {text!r}: too far ahead; give {ALLOWED}") from None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise UserError(f"--no-start-after {text!r}: give {ALLOWED}") from None
