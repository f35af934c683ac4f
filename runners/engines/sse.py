"""Server-sent events (SSE) parsing for the streaming client, after the WHATWG event-stream format.

vLLM, SGLang and LMDeploy all frame an OpenAI stream the same way: each chunk is one
``data: <json>`` line followed by a blank line (``data: {...}\\n\\n``), and the stream ends with
``data: [DONE]\\n\\n``. :class:`SSEParser` takes the bytes as they arrive, in pieces of any size,
and gives back whole events:

- lines end in LF, CRLF or CR; a line (or a multi-byte character, or a CRLF) may be split
  across pieces;
- a blank line ends an event; several ``data:`` lines in one event are joined with ``\\n``;
  an event without a ``data:`` line is not an event;
- ``:`` starts a comment (keep-alive pings), ignored; other fields (``event:``, ``id:``,
  ``retry:``) are read past;
- one space after the colon is part of the framing, not of the value; a leading byte-order mark
  is dropped;
- each event carries the time its first ``data:`` line arrived (the ``at`` of that piece).

One leniency beyond the standard: :meth:`SSEParser.close`, at the end of the stream, delivers
an event whose closing blank line never came (a stream that ends on ``data: [DONE]`` is done).
"""

from __future__ import annotations

from dataclasses import dataclass

#: The data of the event that ends an OpenAI stream.
DONE = "[DONE]"

_BOM = "\ufeff"


@dataclass(frozen=True)
class SSEEvent:
    """One event: its data (the ``data:`` lines joined by ``\\n``) and ``received_at``, the time
    (the caller's clock, seconds) its first ``data:`` line arrived."""

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
        self._data: list[str] = []  # the data lines of the event being read
        self._data_at = 0.0

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
        events: list[SSEEvent] = []
        for line in lines:
            event = self._line(line.decode("utf-8", errors="replace"), at)
            if event is not None:
                events.append(event)
        return events

    def close(self, at: float = 0.0) -> list[SSEEvent]:
        """The end of the stream: the last line and event even without their line end and blank line."""
        events: list[SSEEvent] = []
        if self._pending:
            event = self._line(self._pending.decode("utf-8", errors="replace"), at)
            self._pending = b""
            if event is not None:
                events.append(event)
        event = self._dispatch()
        if event is not None:
            events.append(event)
        return events

    def _line(self, line: str, at: float) -> SSEEvent | None:
        if self._first_line:
            self._first_line = False
            line = line.removeprefix(_BOM)
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "data":
            if not self._data:
                self._data_at = at
            self._data.append(value)
        return None

    def _dispatch(self) -> SSEEvent | None:
        if not self._data:
            return None
        event = SSEEvent(data="\n".join(self._data), received_at=self._data_at)
        self._data = []
        return event
