"""Arrival processes: when each request reaches the gateway, in seconds from the run's start.

- ``all-at-once``: every request at t = 0 (the offline / batch setting).
- ``poisson``: exponential inter-arrival times with mean 1 / rate.
- ``gamma``: gamma inter-arrival times with shape = burstiness and scale = 1 / (rate * burstiness),
  exactly vLLM's ``--burstiness`` (burstiness 1 is Poisson; below 1 is burstier, above 1 steadier).
- ``constant``: one request every 1 / rate seconds.
- ``replay``: timestamps (seconds) read from a file, shifted so the first is 0.

The first request arrives at t = 0 in every process, as in vLLM's benchmark client.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from runners import paths
from runners.errors import ConfigError, DatasetError
from runners.input_model import InputModel

if TYPE_CHECKING:
    import numpy as np

ArrivalProcess = Literal["all-at-once", "poisson", "gamma", "constant", "replay"]
#: The processes that take a rate (requests per second).
RATE_PROCESSES: tuple[str, ...] = ("poisson", "gamma", "constant")


class ArrivalConfig(InputModel):
    """An arrival process and its parameters. ``rate`` is requests per second."""

    process: ArrivalProcess = "poisson"
    rate: float | None = Field(
        default=4.0,
        ge=1e-6,
        le=1e6,
        description="requests per second, finite: 1e-6 (one request in 11.6 days) to 1e6 (no client sends faster; "
        "use all-at-once for a burst)",
    )
    burstiness: float = Field(
        default=1.0,
        ge=0.01,
        le=1000.0,
        description="gamma shape; 1 = Poisson, below 1 burstier, above 1 steadier; 0.01 to 1000",
    )
    replay_file: str | None = Field(default=None, description="timestamps file for 'replay'")

    @model_validator(mode="after")
    def _needs(self) -> "ArrivalConfig":
        if self.process in RATE_PROCESSES and self.rate is None:
            raise ValueError(f"process {self.process!r} needs rate (requests per second, > 0)")
        if self.process == "replay" and not self.replay_file:
            raise ValueError("process 'replay' needs replay_file (one timestamp in seconds per line)")
        return self


def read_timestamps(path: str | Path) -> np.ndarray:
    """Timestamps in seconds from a JSON list, or a text/CSV file with one number per line.

    A CSV header is allowed; the column ``arrival_s`` or ``timestamp`` is used when present,
    else the first column. Timestamps must be finite and non-decreasing.
    """
    import numpy as np

    file = Path(path)
    if not paths.is_file(file):
        raise DatasetError(str(file), "replay file not found (expected one timestamp in seconds per line)")
    try:  # utf-8-sig: a byte-order mark is not part of the first timestamp (or header)
        text = file.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DatasetError(
            str(file), f"not UTF-8 text (byte {exc.start}); expected one timestamp in seconds per line"
        ) from None
    except OSError as exc:
        raise DatasetError(str(file), f"could not be read ({exc.strerror or exc})") from None
    values: list[float] = []
    if file.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DatasetError(str(file), f"not valid JSON ({exc.msg}); expected a list of timestamps") from exc
        except RecursionError:
            raise DatasetError(str(file), "nested too deeply; expected a flat JSON list of timestamps") from None
        if not isinstance(data, list):
            raise DatasetError(str(file), "expected a JSON list of timestamps in seconds")
        raw = data
    else:
        try:
            rows = [row for row in csv.reader(text.splitlines()) if row and row[0].strip()]
        except csv.Error as exc:
            raise DatasetError(
                str(file), f"not a readable CSV/text file ({exc}); expected one timestamp in seconds per line"
            ) from None
        column = 0
        if rows:
            header = [cell.strip().lower() for cell in rows[0]]
            try:
                float(header[0])
            except ValueError:
                for name in ("arrival_s", "timestamp"):
                    if name in header:
                        column = header.index(name)
                        break
                rows = rows[1:]
        raw = [row[column] if column < len(row) else "" for row in rows]
    for number, item in enumerate(raw, start=1):
        try:
            if isinstance(item, bool):
                raise TypeError("a boolean is not a timestamp")
            value = float(item)
        except (TypeError, ValueError, OverflowError):
            raise DatasetError(str(file), f"entry {number} is {item!r}; expected a number of seconds") from None
        if not np.isfinite(value):
            raise DatasetError(str(file), f"entry {number} is not a finite number")
        values.append(value)
    if not values:
        raise DatasetError(str(file), "holds no timestamps")
    stamps = np.asarray(values, dtype=float)
    if np.any(np.diff(stamps) < 0):
        first_bad = int(np.argmax(np.diff(stamps) < 0)) + 2
        raise DatasetError(str(file), f"timestamps must be non-decreasing (entry {first_bad} goes back in time)")
    return stamps - stamps[0]


def arrival_times(config: ArrivalConfig, count: int, seed: int) -> np.ndarray:
    """``count`` arrival times in seconds, non-decreasing, the first at 0."""
    import numpy as np

    if count <= 0:
        return np.zeros(0)
    rng = np.random.default_rng(seed)
    if config.process == "all-at-once":
        return np.zeros(count)
    if config.process == "replay":
        stamps = read_timestamps(config.replay_file or "")
        if len(stamps) < count:
            raise ConfigError(
                "workload.arrival.replay_file",
                f"{config.replay_file} has {len(stamps)} timestamps but {count} requests were asked for",
            )
        return stamps[:count]
    rate = float(config.rate or 0.0)
    if config.process == "constant":
        gaps = np.full(count - 1, 1.0 / rate)
    elif config.process == "poisson":
        gaps = rng.exponential(1.0 / rate, size=count - 1)
    else:  # gamma
        shape = config.burstiness
        gaps = rng.gamma(shape, 1.0 / (rate * shape), size=count - 1)
    times = np.concatenate(([0.0], np.cumsum(gaps)))
    if not np.all(np.isfinite(times)):  # the bounds on rate and burstiness should make this impossible
        raise ConfigError(
            "workload.arrival",
            f"{config.process} arrivals at rate {rate:g}/s (burstiness {config.burstiness:g}) gave non-finite "
            "arrival times; expected a finite, positive rate and burstiness",
        )
    return times
