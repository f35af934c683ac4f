"""Production traces replayed with their own timing: Mooncake JSONL, Azure LLM inference CSV and
BurstGPT CSV (:class:`TraceConfig`, :func:`load_trace`).

A trace decides when each request arrives and how long its prompt and reply are; schedlab makes
the prompt text (:func:`prompt_text`). Each reader yields :class:`TraceRecord` s (the trace's
own clock, input and output tokens, task, prompt segments, the 1-based line of the file);
:func:`load_trace` puts them in time order, keeps the first ``max_requests`` and turns the clock
into arrival offsets: seconds from the first record sent, divided by ``speedup`` (a *fixed
schedule*, as AIPerf's ``--fixed-schedule``).

Formats (checked 2026-11-27 against the sources named):

- **Mooncake** (``.jsonl``, optionally ``.gz``): one JSON object per line, ``timestamp``
  (milliseconds, integer or decimal, any origin), ``input_length`` and ``output_length``
  (tokens), ``hash_ids`` (one id per 512-token block of the prompt; equal ids are equal blocks,
  and the last block may be partial). Checked against kvcache-ai/Mooncake
  ``FAST25-release/README.md`` and ``FAST25-release/traces/conversation_trace.jsonl`` (every
  line has ceil(input_length / 512) ids, e.g. 6,758 tokens and 14 ids) and AIPerf's loader
  (ai-dynamo/aiperf ``dataset/loader/mooncake_trace.py``; its prompt builder
  ``dataset/generator/prompt.py`` gives each id 512 tokens and the last one
  ``input_length - 512 (n - 1)``, refusing a last block outside 1..512). Here a prompt's
  segments are one piece per id (content id = the hash id, 512 tokens, the last one the
  remainder), so two requests share exactly the blocks of their common hash-id prefix. More ids
  than ``input_length`` fills is an error; fewer (or none: AIPerf makes ``hash_ids`` optional)
  leaves the rest of the prompt the request's own.
- **Azure LLM inference** (``.csv``, 2023 and 2024 releases, Azure/AzurePublicDataset
  ``data/AzureLLMInferenceTrace_code.csv`` / ``_conv.csv``): header
  ``TIMESTAMP,ContextTokens,GeneratedTokens``; timestamps are date-times with a fraction of a
  second (2023: ``2023-11-16 18:17:03.9799600``, seven digits; 2024:
  ``2024-05-10 00:00:00.009930+00:00``; a time zone is optional, none means UTC). The code file
  is task ``code``, the conversation file task ``chat``: from ``TraceConfig.task``, else from the
  file name (containing ``code`` or ``conv``). Prompts share nothing (no segments).
- **BurstGPT** (``.csv``, HPMLL/BurstGPT): header ``Timestamp,Model,Request tokens,Response
  tokens,Total tokens,Log Type`` (``Timestamp`` in seconds from the trace's start; the first,
  third and fourth columns are required, as AIPerf's ``burst_gpt.py`` requires). A row with
  ``Response tokens`` 0 is a failed request: skipped and counted. Task chat; no sharing.

In every format a record with no prompt or no output tokens is skipped and counted (an engine
cannot be asked for 0 tokens). A file that cannot be read is one :class:`DatasetError` naming
the file, the line (1-based, as an editor shows it), the field and what was expected.
"""

from __future__ import annotations

import csv
import functools
import gzip
import io
import json
import math
import re
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from runners import paths
from runners.errors import ConfigError, DatasetError
from runners.input_model import InputModel
from runners.workload.conversations import DATASETS_DIR
from runners.workload.prefix import MOONCAKE_BLOCK_TOKENS
from runners.workload.tokens import CHARACTERS_PER_TOKEN

TraceFormat = Literal["auto", "mooncake", "azure", "burstgpt"]
#: The formats a trace file may have (``auto`` detects one of them).
TRACE_FORMATS: tuple[str, ...] = ("mooncake", "azure", "burstgpt")
#: The bundled synthetic samples (runners.workload.trace_samples makes them).
TRACES_DIR = DATASETS_DIR / "traces"
#: Largest speed-up (a day of trace in 0.09 s).
MAX_SPEEDUP = 1e6
#: Hash ids at or above this would collide with the content ids of prompts of their own
#: (runners.workload.prefix.own_segments: bit 40 set).
MAX_HASH_ID = 2**40 - 1

MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")

#: Reasons a record is skipped (counted in the load report).
NO_PROMPT = "no prompt tokens"
NO_OUTPUT = "no output tokens"
BURSTGPT_FAILED = "failed (Response tokens 0)"

_EXPECTED = {
    "mooncake": "one JSON object per line with timestamp (ms), input_length, output_length (tokens) and hash_ids",
    "azure": "a CSV with the header TIMESTAMP,ContextTokens,GeneratedTokens",
    "burstgpt": "a CSV with the header Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type",
}


class TraceConfig(InputModel):
    """A production trace to replay: its arrivals, lengths and tasks replace the datasets and the
    arrival process."""

    path: str = Field(description="trace file: Mooncake .jsonl, Azure LLM inference .csv or BurstGPT .csv")
    format: TraceFormat = Field(
        default="auto", description="auto (by extension and header or keys), mooncake, azure or burstgpt"
    )
    speedup: float = Field(
        default=1.0,
        gt=0,
        le=MAX_SPEEDUP,
        description="arrival offsets are divided by this (2 replays the trace twice as fast); > 0, at most 1e6",
    )
    task: Literal["chat", "code"] | None = Field(
        default=None,
        description="task of every request; default: chat (Mooncake, BurstGPT), Azure by file name (code / conv)",
    )

    def label(self) -> str:
        """Short name: format (when given), file name and speed-up."""
        speed = "" if self.speedup == 1 else f" x{self.speedup:g}"
        kind = "" if self.format == "auto" else f"{self.format} "
        return f"trace {kind}{Path(self.path).name}{speed}"

    @property
    def is_synthetic(self) -> bool:
        """Whether the trace is one of the bundled synthetic samples (datasets/traces/)."""
        try:
            return Path(self.path).resolve().parent == TRACES_DIR.resolve()
        except (OSError, ValueError):
            return False


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One request of a trace: ``time_ns`` on the trace's own clock (nanoseconds, any origin),
    prompt and output tokens, task, prompt segments ((content id, tokens) pieces, as
    ``Request.segments``; empty: the prompt is its own) and the 1-based line of the file."""

    time_ns: int
    input_tokens: int
    output_tokens: int
    task: str
    segments: tuple[tuple[int, int], ...]
    line: int


@dataclass
class LoadedTrace:
    """The records sent (time order, at most ``max_requests``), their arrival offsets in seconds
    (the first at 0, divided by the speed-up), and what was read (:meth:`report`)."""

    records: list[TraceRecord]
    arrivals_s: list[float]
    format: str
    source: str
    speedup: float
    read: int  #: usable records in the file (after skips)
    skipped: Counter = field(default_factory=Counter)
    trace_span_s: float = 0.0  #: the whole file's span at its own timing, seconds
    reordered: bool = False  #: the file was not in time order (sorted, stably)
    held_out: list[TraceRecord] = field(default_factory=list)  #: records past the first ``max_requests``
    synthetic: bool = False

    def report(self) -> dict[str, Any]:
        """The loader report written to config.json (``resolved.workload_reports.trace``)."""
        return {
            "source": self.source,
            "format": self.format,
            "synthetic": self.synthetic,
            "records": self.read,
            "skipped": dict(self.skipped),
            "sent": len(self.records),
            "speedup": self.speedup,
            "span_s": self.arrivals_s[-1] if self.arrivals_s else 0.0,
            "trace_span_s": self.trace_span_s,
            "reordered": self.reordered,
            "tasks": dict(Counter(record.task for record in self.records)),
        }


# -- errors ----------------------------------------------------------------------------------------
def _error(path: Path, line: int, name: str | None, problem: str, expected: str) -> DatasetError:
    where = f"line {line}" + (f", field {name!r}" if name is not None else "")
    return DatasetError(str(path), f"{where}: {problem}; expected {expected}")


def _quote(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _tokens(path: Path, line: int, name: str, value: Any) -> int:
    """A token count: a whole number >= 0 (a JSON number or CSV text; ``12.0`` is 12)."""
    expected = "a whole number of tokens >= 0"
    number: Any = value
    if isinstance(value, str):
        text = value.strip()
        try:
            number = int(text)
        except ValueError:
            try:
                number = float(text)
            except ValueError:
                raise _error(path, line, name, f"{_quote(value)} is not a number", expected) from None
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        raise _error(path, line, name, f"{_quote(value)} is not a number", expected)
    if isinstance(number, float):
        if not math.isfinite(number) or not number.is_integer():
            raise _error(path, line, name, f"{_quote(value)} is not a whole number", expected)
        number = int(number)
    if number < 0:
        raise _error(path, line, name, f"{number} is negative", expected)
    return number


def _decimal_ns(path: Path, line: int, name: str, value: Any, unit_ns: int, expected: str) -> int:
    """A time in ``unit_ns`` nanoseconds per unit (a JSON number or CSV text), exact to the ns."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise _error(path, line, name, f"{_quote(value)} is not a number", expected)
    try:
        number = Decimal(
            value.strip() if isinstance(value, str) else repr(value) if isinstance(value, float) else value
        )
    except InvalidOperation:
        raise _error(path, line, name, f"{_quote(value)} is not a number", expected) from None
    if not number.is_finite():
        raise _error(path, line, name, f"{_quote(value)} is not a finite number", expected)
    if number < 0:
        raise _error(path, line, name, f"{_quote(value)} is negative", expected)
    if number > Decimal(10) ** 15:  # 31.7 million years in seconds: not a timestamp of any unit here
        raise _error(path, line, name, f"{_quote(value)} is too large", expected)
    return int((number * unit_ns).to_integral_value())


#: 2023-11-16 18:17:03.9799600, 2024-05-10 00:00:00.009930+00:00, an optional 'T' and 'Z'.
_DATETIME = re.compile(
    r"(\d{4})-(\d{1,2})-(\d{1,2})[ T](\d{1,2}):(\d{2}):(\d{2})(?:\.(\d{1,12}))?\s*(Z|[+-]\d{2}:?\d{2})?"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _datetime_ns(path: Path, line: int, name: str, value: str) -> int:
    """A date-time as nanoseconds since 1970 UTC (no time zone: UTC)."""
    expected = "a date and time such as 2023-11-16 18:17:03.9799600 (a time zone such as +00:00 is optional)"
    match = _DATETIME.fullmatch(value.strip())
    if match is None:
        raise _error(path, line, name, f"{_quote(value)} is not a date and time", expected)
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    fraction, zone = match.group(7) or "", match.group(8)
    offset = timedelta(0)
    if zone and zone != "Z":
        digits = zone[1:].replace(":", "")
        offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
        if zone[0] == "-":
            offset = -offset
    try:
        moment = datetime(year, month, day, hour, minute, second, tzinfo=timezone(offset))
    except ValueError as exc:
        raise _error(path, line, name, f"{_quote(value)} is not a valid date and time ({exc})", expected) from None
    whole = (moment - _EPOCH) // timedelta(seconds=1)
    return whole * 1_000_000_000 + int((fraction + "000000000")[:9])


# -- reading ---------------------------------------------------------------------------------------
def _open_text(path: Path) -> io.TextIOBase:
    """The file as text (utf-8, a byte-order mark dropped; gzip by the .gz suffix), newlines kept
    as in the file so line numbers are an editor's."""
    raw: Any = gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")
    return io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")


def _lines(path: Path, expected: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, text) of every line; a read or decoding failure is one error."""
    number = 0
    try:
        with _open_text(path) as handle:
            for number, text in enumerate(handle, start=1):
                yield number, text
    except UnicodeDecodeError as exc:
        raise _error(path, number + 1, None, f"not UTF-8 text ({exc.reason})", expected) from None
    except (OSError, EOFError, zlib.error) as exc:
        raise DatasetError(str(path), f"could not be read after line {number} ({exc}); expected {expected}") from None


def _empty(path: Path, expected: str) -> DatasetError:
    return _error(path, 1, None, "the file is empty", expected)


def _reader_task(task: str | None, default: str) -> str:
    return task if task is not None else default


def read_mooncake(path: Path, task: str | None = None, skipped: Counter | None = None) -> Iterator[TraceRecord]:
    """The records of a Mooncake JSONL trace (module doc); blank lines are not records."""
    expected = _EXPECTED["mooncake"]
    skipped = Counter() if skipped is None else skipped
    task = _reader_task(task, "chat")
    seen = False
    for number, raw in _lines(path, expected):
        text = raw.strip()
        if not text:
            continue
        seen = True
        try:
            entry = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _error(path, number, None, f"not valid JSON ({exc.msg}: column {exc.colno})", expected) from None
        except RecursionError:
            raise _error(path, number, None, "nested too deeply", expected) from None
        if not isinstance(entry, dict):
            raise _error(path, number, None, f"a JSON {type(entry).__name__}, not an object", expected)
        for name in MOONCAKE_FIELDS[:3]:
            if name not in entry:
                raise _error(path, number, name, "missing", expected)
        time_ns = _decimal_ns(path, number, "timestamp", entry["timestamp"], 1_000_000, "milliseconds, a number >= 0")
        input_tokens = _tokens(path, number, "input_length", entry["input_length"])
        output_tokens = _tokens(path, number, "output_length", entry["output_length"])
        segments = _mooncake_segments(path, number, entry.get("hash_ids"), input_tokens)
        if input_tokens == 0:
            skipped[NO_PROMPT] += 1
        elif output_tokens == 0:
            skipped[NO_OUTPUT] += 1
        else:
            yield TraceRecord(time_ns, input_tokens, output_tokens, task, segments, number)
    if not seen:
        raise _empty(path, expected)


def _mooncake_segments(path: Path, line: int, hash_ids: Any, input_tokens: int) -> tuple[tuple[int, int], ...]:
    """One (hash id, tokens) piece per block: 512 tokens, the last the remainder; tokens past the
    last block are the request's own piece (keyed by the line)."""
    block = MOONCAKE_BLOCK_TOKENS
    if hash_ids is None:
        hash_ids = []
    if not isinstance(hash_ids, list):
        raise _error(path, line, "hash_ids", f"{_quote(hash_ids)} is not a list", "a list of block ids (integers)")
    for index, value in enumerate(hash_ids):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_HASH_ID:
            raise _error(
                path,
                line,
                "hash_ids",
                f"entry {index + 1} is {_quote(value)}",
                "block ids that are integers from 0 to 2**40 - 1",
            )
    needed = -(-input_tokens // block)
    if len(hash_ids) > needed:
        raise _error(
            path,
            line,
            "hash_ids",
            f"{len(hash_ids)} block ids but input_length {input_tokens} fills {needed} block(s) of {block} tokens",
            f"at most ceil(input_length / {block}) = {needed} ids",
        )
    pieces = [(value, min(block, input_tokens - block * index)) for index, value in enumerate(hash_ids)]
    rest = input_tokens - block * len(hash_ids)
    if rest > 0 and pieces:  # the tail no block id names: this request's own
        pieces.append((zlib.crc32(f"{path.name}:{line}".encode()) | (1 << 40), rest))
    return tuple(pieces)


def _csv_rows(path: Path, columns: tuple[str, ...], fmt: str) -> Iterator[tuple[int, dict[str, str]]]:
    """(line, {column: text}) of every data row; the header must hold ``columns`` (matched
    without regard to case or surrounding spaces)."""
    expected = _EXPECTED[fmt]
    lines = _lines(path, expected)
    reader = csv.reader(text for _, text in lines)
    try:
        header = next(reader, None)
        if header is None:
            raise _empty(path, expected)
        names = [cell.strip().lower() for cell in header]
        index = {}
        for column in columns:
            if column.lower() not in names:
                raise _error(path, reader.line_num, column, "missing from the header", expected)
            index[column] = names.index(column.lower())
        rows = 0
        for row in reader:
            line = reader.line_num
            if not row or not any(cell.strip() for cell in row):
                continue
            rows += 1
            values = {}
            for column in columns:
                if index[column] >= len(row):
                    raise _error(
                        path, line, column, f"missing (the row has {len(row)} of {len(names)} columns)", expected
                    )
                values[column] = row[index[column]]
            yield line, values
    except csv.Error as exc:
        raise _error(path, reader.line_num, None, f"not readable as CSV ({exc})", expected) from None
    if rows == 0:
        raise _error(path, 2, None, "no records after the header", expected)


def azure_task(path: Path, task: str | None = None) -> str:
    """The task of an Azure trace: ``task`` if given, else code for a file name holding "code",
    chat for one holding "conv"; ConfigError (naming the file) when the name says neither."""
    if task is not None:
        return task
    name = path.name.lower()
    found = {found for word, found in (("code", "code"), ("conv", "chat")) if word in name}
    if len(found) != 1:
        raise ConfigError(
            "workload.trace.task",
            f"cannot tell the task of the Azure trace {path} from its name (it holds "
            f"{'both' if found else 'neither of'} 'code' and 'conv'); expected a file name as "
            "AzureLLMInferenceTrace_code.csv / _conv.csv, or set the task (chat or code)",
        )
    return found.pop()


def read_azure(path: Path, task: str | None = None, skipped: Counter | None = None) -> Iterator[TraceRecord]:
    """The records of an Azure LLM inference trace CSV (module doc)."""
    skipped = Counter() if skipped is None else skipped
    task = azure_task(path, task)
    stamp, context, generated = AZURE_COLUMNS
    for line, row in _csv_rows(path, AZURE_COLUMNS, "azure"):
        time_ns = _datetime_ns(path, line, stamp, row[stamp])
        input_tokens = _tokens(path, line, context, row[context])
        output_tokens = _tokens(path, line, generated, row[generated])
        if input_tokens == 0:
            skipped[NO_PROMPT] += 1
        elif output_tokens == 0:
            skipped[NO_OUTPUT] += 1
        else:
            yield TraceRecord(time_ns, input_tokens, output_tokens, task, (), line)


def read_burstgpt(path: Path, task: str | None = None, skipped: Counter | None = None) -> Iterator[TraceRecord]:
    """The records of a BurstGPT CSV (module doc); failures (``Response tokens`` 0) are skipped
    and counted under :data:`BURSTGPT_FAILED`."""
    skipped = Counter() if skipped is None else skipped
    task = _reader_task(task, "chat")
    stamp, request, response = BURSTGPT_COLUMNS
    for line, row in _csv_rows(path, BURSTGPT_COLUMNS, "burstgpt"):
        time_ns = _decimal_ns(path, line, stamp, row[stamp], 1_000_000_000, "seconds, a number >= 0")
        input_tokens = _tokens(path, line, request, row[request])
        output_tokens = _tokens(path, line, response, row[response])
        if output_tokens == 0:
            skipped[BURSTGPT_FAILED] += 1
        elif input_tokens == 0:
            skipped[NO_PROMPT] += 1
        else:
            yield TraceRecord(time_ns, input_tokens, output_tokens, task, (), line)


READERS: dict[str, Callable[[Path, str | None, Counter | None], Iterator[TraceRecord]]] = {
    "mooncake": read_mooncake,
    "azure": read_azure,
    "burstgpt": read_burstgpt,
}


def detect_format(path: Path) -> str:
    """The format of a trace file: Mooncake for .jsonl/.json (or a first line that is a JSON
    object), else by the CSV header (Azure's TIMESTAMP/ContextTokens/GeneratedTokens, BurstGPT's
    Timestamp/Request tokens/Response tokens). DatasetError when it cannot tell."""
    suffixes = [suffix.lower() for suffix in path.suffixes]
    if suffixes[-1:] == [".gz"]:
        suffixes = suffixes[:-1]
    if suffixes[-1:] in ([".jsonl"], [".json"]):
        return "mooncake"
    first = ""
    for _, text in _lines(path, "a Mooncake .jsonl, Azure .csv or BurstGPT .csv trace"):
        if text.strip():
            first = text.strip()
            break
    if not first:
        raise _empty(path, "a Mooncake .jsonl, Azure .csv or BurstGPT .csv trace")
    if first.startswith("{"):
        return "mooncake"
    try:
        header = {cell.strip().lower() for cell in next(csv.reader([first]))}
    except csv.Error:
        header = set()
    for fmt, columns in (("azure", AZURE_COLUMNS), ("burstgpt", BURSTGPT_COLUMNS)):
        if {column.lower() for column in columns} <= header:
            return fmt
    raise DatasetError(
        str(path),
        f"line 1: cannot tell the trace format from {_quote(first[:80])}; expected a Mooncake .jsonl "
        f"(JSON objects with {', '.join(MOONCAKE_FIELDS)}), or a CSV whose header holds "
        f"{','.join(AZURE_COLUMNS)} (Azure) or {','.join(BURSTGPT_COLUMNS)} (BurstGPT); or set the "
        "format (--trace-format mooncake|azure|burstgpt)",
    )


def load_trace(
    config: TraceConfig,
    max_requests: int | None = None,
    rejects: Callable[[int, int], str | None] | None = None,
) -> LoadedTrace:
    """Read ``config``'s trace, skip what ``rejects(input, output)`` names a reason for (counted),
    sort by time (stably) and keep the first ``max_requests`` records; arrival offsets are
    seconds from the first record kept, divided by ``config.speedup``."""
    path = Path(config.path)
    if not paths.is_file(path):
        raise DatasetError(str(path), "trace file not found; expected a Mooncake .jsonl, Azure .csv or BurstGPT .csv")
    fmt = detect_format(path) if config.format == "auto" else config.format
    skipped: Counter = Counter()
    records: list[TraceRecord] = []
    for record in READERS[fmt](path, config.task, skipped):
        reason = rejects(record.input_tokens, record.output_tokens) if rejects is not None else None
        if reason is not None:
            skipped[reason] += 1
        else:
            records.append(record)
    if not records:
        counts = ", ".join(f"{count} {reason}" for reason, count in skipped.items()) or "none read"
        raise DatasetError(str(path), f"holds no usable record ({counts}); expected {_EXPECTED[fmt]}")
    reordered = any(later.time_ns < earlier.time_ns for earlier, later in zip(records, records[1:]))
    if reordered:
        records.sort(key=lambda record: record.time_ns)
    kept = records if max_requests is None else records[:max_requests]
    start = kept[0].time_ns
    arrivals = [(record.time_ns - start) / 1e9 / config.speedup for record in kept]
    return LoadedTrace(
        kept,
        arrivals,
        fmt,
        str(path),
        config.speedup,
        len(records),
        skipped,
        trace_span_s=(records[-1].time_ns - records[0].time_ns) / 1e9,
        reordered=reordered,
        held_out=records[len(kept) :],
        synthetic=config.is_synthetic,
    )


# -- prompt text -----------------------------------------------------------------------------------
#: Characters of the made-up text prompts are cut from (repeated when a prompt is longer).
TEXT_CORPUS_CHARS = 1 << 20
#: Seed of the made-up text (the vocabulary and the word order).
TEXT_SEED = 20261127


@functools.cache
def _corpus() -> str:
    import numpy as np

    from runners.workload.synthetic import made_up_vocabulary

    rng = np.random.default_rng(TEXT_SEED)
    vocabulary = made_up_vocabulary(400, rng)
    words = [vocabulary[i] for i in rng.integers(len(vocabulary), size=TEXT_CORPUS_CHARS // 3).tolist()]
    return " ".join(words)[:TEXT_CORPUS_CHARS]


def content_text(content_id: int, tokens: int, chars_per_token: float = CHARACTERS_PER_TOKEN) -> str:
    """The text of ``tokens`` tokens of content ``content_id``: ``chars_per_token`` characters per
    token (by default 4, which the default token approximation counts back; a real tokenizer's
    own ratio for this text: :func:`corpus_chars_per_token`), the same text for the same id in
    every process, and a shorter piece of an id is the start of a longer one. It starts with the
    id in hexadecimal, so different ids never share their start."""
    characters = int(tokens * chars_per_token)
    corpus = _corpus()
    start = zlib.crc32(content_id.to_bytes(16, "little")) % len(corpus)
    text = f"{content_id:x} " + corpus[start : start + characters]
    while len(text) < characters:
        text += " " + corpus[: characters - len(text)]
    return text[:characters]


def prompt_text(
    segments: tuple[tuple[int, int], ...],
    own_id: int,
    input_tokens: int,
    chars_per_token: float = CHARACTERS_PER_TOKEN,
) -> str:
    """A prompt of about ``input_tokens`` tokens (``chars_per_token`` characters each): its
    segments' texts in order, so equal segments give identical text; with no segments, one
    piece of content ``own_id``."""
    if not segments:
        return content_text(own_id, input_tokens, chars_per_token)
    return "".join(content_text(content_id, tokens, chars_per_token) for content_id, tokens in segments)


#: Characters of the made-up text a tokenizer counts to find its ratio (:func:`corpus_chars_per_token`).
RATIO_SAMPLE_CHARS = 40_000


def corpus_chars_per_token(count: Callable[[list[str]], list[int]]) -> float:
    """Characters per token of the made-up text under a real tokenizer (``count``: its counter's
    ``count``), measured on its first :data:`RATIO_SAMPLE_CHARS` characters, so a trace's prompt
    of N tokens is about N tokens for the engine too (the tiny Llama of the tests counts about 2.5
    characters per token of this text, not 4); within a few percent, as a long text's count is
    not the sum of its pieces' exactly."""
    sample = _corpus()[:RATIO_SAMPLE_CHARS]
    tokens = count([sample])[0]
    return len(sample) / tokens if tokens > 0 else CHARACTERS_PER_TOKEN
