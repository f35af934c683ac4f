"""Server-sent events (SSE) parsing for the streaming client.

vLLM, SGLang and LMDeploy all frame an OpenAI stream the same way: each chunk is one
``data: <json>`` line followed by a blank line (``data: {...}\\n\\n``), and the stream ends with
``data: [DONE]\\n\\n``. :class:`SSEParser` takes the bytes as they arrive, in pieces of any size,
and gives back one event per ``data:`` line:

- lines end in LF, CRLF or CR; a line (or a multi-byte character, or a CRLF) may be split
  across pieces;
- a line that, stripped of surrounding white space, starts with ``data:`` is an event at once,
  its value stripped too; blank lines, ``:`` comments (keep-alive pings), other fields
  (``event:``, ``id:``, ``retry:``) and a bare ``data`` are read past; a leading byte-order mark
  is dropped;
- each event carries the time its line was complete (the ``at`` of the piece that ended it).

Unlike the WHATWG event-stream format, a ``data:`` line does not wait for the blank line and
several ``data:`` lines are not joined: every OpenAI-compatible server sends one whole JSON chunk
per line, so a chunk is counted the moment its line arrives, a server or proxy that leaves out
the blank lines still streams, and a stream cut after a chunk's line keeps that chunk (the
client has always read streams this way). :meth:`SSEParser.close`, at the end of the stream,
delivers a last ``data:`` line that never got its line end. A line longer than
:data:`MAX_LINE_BYTES` raises :class:`LineTooLong` (a server that never ends a line cannot fill
the client's memory).
"""

from __future__ import annotations

from dataclasses import dataclass

#: The data of the event that ends an OpenAI stream.
DONE = "[DONE]"

_BOM = "\ufeff"

#: Longest line read, bytes: aiohttp's limit for a line of a body read line by line (twice its
#: 64 KiB read buffer), kept now that the body is read in pieces. An OpenAI chunk line is ~200 B.
MAX_LINE_BYTES = 2**17


class LineTooLong(ValueError):
    """A line of the stream longer than :data:`MAX_LINE_BYTES`."""


@dataclass(frozen=True)
class SSEEvent:
    """One event: the value of one ``data:`` line and ``received_at``, the time (the caller's
    clock, seconds) that line was complete."""

    data: str
    received_at: float

    @property
    def done(self) -> bool:
        """Whether this is the ``[DONE]`` event that ends an OpenAI stream."""
        return self.data.strip() == DONE


class SSEParser:
    """Incremental event-stream parser: :meth:`feed` pieces of the body, :meth:`close` at its end."""

    def __init__(self) -> None:
        self._pending = b""  # the start of a line whose end has not arrived
        self._after_cr = False  # the last piece ended in CR: a LF at the start of the next is its CRLF
        self._first_line = True

    def feed(self, piece: bytes, at: float = 0.0) -> list[SSEEvent]:
        """The events that ``piece`` completes, in order; ``at`` is when it arrived (seconds)."""
        if not piece:
            return []
        if self._after_cr and piece.startswith(b"\n"):
            piece = piece[1:]
        self._after_cr = piece.endswith(b"\r")
        buffer = self._pending + piece
        lines = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        self._pending = lines.pop()
        if len(self._pending) > MAX_LINE_BYTES:
            raise LineTooLong(f"a stream line longer than {MAX_LINE_BYTES} bytes")
        events: list[SSEEvent] = []
        for line in lines:
            if len(line) > MAX_LINE_BYTES:
                raise LineTooLong(f"a stream line longer than {MAX_LINE_BYTES} bytes")
            event = self._line(line.decode("utf-8", errors="replace"), at)
            if event is not None:
                events.append(event)
        return events

    def close(self, at: float = 0.0) -> list[SSEEvent]:
        """The end of the stream: the last ``data:`` line even without its line end."""
        events: list[SSEEvent] = []
        if self._pending:
            event = self._line(self._pending.decode("utf-8", errors="replace"), at)
            self._pending = b""
            if event is not None:
                events.append(event)
        return events

    def _line(self, line: str, at: float) -> SSEEvent | None:
        if self._first_line:
            self._first_line = False
            line = line.removeprefix(_BOM)
        line = line.strip()
        if not line.startswith("data:"):
            return None
        return SSEEvent(data=line[len("data:") :].strip(), received_at=at)
