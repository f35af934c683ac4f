"""Timestamps written into result files and run ids, in one place.

Every stamp schedlab writes is UTC: ``YYYY-mm-ddTHH:MM:SSZ`` in summaries, job and study files
(``utc_stamp``), ``YYYYmmdd-HHMMSS`` at the front of generated run, job and study ids
(``id_stamp``). Reading a stamp back (``parse_utc_stamp``) never involves the machine's time zone
or daylight saving time.
"""

from __future__ import annotations

import calendar
import time

UTC_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
ID_FORMAT = "%Y%m%d-%H%M%S"


def utc_stamp(unix_s: float | None = None) -> str:
    """``unix_s`` (seconds since the epoch; now when None) as ``YYYY-mm-ddTHH:MM:SSZ``."""
    return time.strftime(UTC_FORMAT, time.gmtime(unix_s))


def id_stamp(unix_s: float | None = None) -> str:
    """``unix_s`` (now when None) as the ``YYYYmmdd-HHMMSS`` UTC prefix of a generated id."""
    return time.strftime(ID_FORMAT, time.gmtime(unix_s))


def parse_utc_stamp(stamp: str | None) -> float | None:
    """Unix seconds of a ``YYYY-mm-ddTHH:MM:SSZ`` stamp; None when absent or malformed."""
    if not stamp:
        return None
    try:
        return float(calendar.timegm(time.strptime(stamp, UTC_FORMAT)))
    except ValueError:
        return None
