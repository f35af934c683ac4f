"""``python -m runners``: a SIGTERM before a command's own stop handling begins (while the modules
load, the config is checked or the workload is built) ends the process with exit code 130 and one
line, as a stop request does, never killed by the signal (-15). A run or study replaces this
handler with its own while it goes, which stops it cleanly and keeps its rows."""

import signal
import sys

from runners.errors import STOPPED_LINE


def _stopped_before_work(signum: int, frame: object) -> None:
    print(STOPPED_LINE, file=sys.stderr)
    raise SystemExit(130)


signal.signal(signal.SIGTERM, _stopped_before_work)

from runners.app.cli import main  # noqa: E402 - after the handler, so a SIGTERM while importing exits 130

raise SystemExit(main())
