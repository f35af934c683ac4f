"""``python -m runners``: SIGTERM while the modules load ends the process with exit code 130 (as a
stop request does), before :func:`runners.cli.main` installs its own handling."""

import signal


def _stopped_while_loading(signum, frame):  # noqa: ARG001 - signal handler signature
    raise SystemExit(130)


signal.signal(signal.SIGTERM, _stopped_while_loading)

from runners.cli import main  # noqa: E402 - after the handler, so a SIGTERM while importing exits 130

raise SystemExit(main())
