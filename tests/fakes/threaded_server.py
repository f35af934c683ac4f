"""A real aiohttp server on a loopback port, run in a background thread: the life cycle the test
servers in :mod:`tests.fakes` share. A subclass adds its routes in :meth:`routes`."""

from __future__ import annotations

import asyncio
import threading

from aiohttp import web


class ThreadedServer:
    """``start()`` serves on ``127.0.0.1:port`` (0 = a free port, filled in once bound) until
    ``stop()``. Subclasses are dataclasses with a ``port`` field and call :meth:`_init_thread`
    from ``__post_init__``."""

    port: int
    shutdown_timeout_s: float = 60.0  # aiohttp's default wait for open handlers at stop

    def _init_thread(self) -> None:
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    def on_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Called in the server thread once its loop exists, before the routes are served."""

    def on_stopping(self) -> None:
        """Called in the server thread when the loop has stopped, before open handlers are closed."""

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self.on_loop(loop)
        app = web.Application()
        self.routes(app)
        runner = web.AppRunner(app, shutdown_timeout=self.shutdown_timeout_s)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", self.port)
        loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self._ready.set()
        loop.run_forever()
        self.on_stopping()
        loop.run_until_complete(runner.cleanup())
        loop.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self):
        """Serve in a background thread; returns self once the port is bound."""
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)


def serve_until_signalled(server: ThreadedServer, die_after_s: float | None = None) -> None:
    """Run a started fake as a launched server does: until SIGTERM or SIGINT (then stop it), or,
    with ``die_after_s``, exit with code 9 after that many seconds (a crashing engine)."""
    import os
    import signal
    import time

    if die_after_s is not None:
        time.sleep(die_after_s)
        os._exit(9)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    server.stop()
