"""One colour per scheduler, in every chart of the app; tasks told apart by marker, dash or pattern.

A scheduler's colour depends on its name alone, never on which other runs a chart holds or in what
order, so mcsf is the same colour in the bars, the CDFs, the KV-cache chart and on every page. The
registered schedulers (:data:`runners.registry.SCHEDULERS`, in registration order) take the distinct
colours of :data:`SCHEDULER_PALETTE`; any other name (a scheduler added later, an imported peer's
run) takes one of :data:`EXTRA_PALETTE` by a stable hash of its name (crc32, the same in every
process). Several runs of one scheduler in one chart keep its hue, each later one a lighter shade
(:func:`run_colours`). Tasks never get a colour of their own: :data:`TASK_SYMBOLS` (markers),
:data:`TASK_PATTERNS` (bar fill patterns) and the SLO lines' dashes (``charts.SLO_DASH``) tell
them apart. Colours are ``#rrggbb`` strings.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from runners.registry import SCHEDULERS

#: Distinct colours for the registered schedulers, in registration order (fcfs, static, slo-sa, ...):
#: a 16-colour set drawn from Tableau 20's dark row and Okabe-Ito, none of them the SLO lines' grey.
SCHEDULER_PALETTE: tuple[str, ...] = (
    "#4e79a7",  # blue
    "#f28e2b",  # orange
    "#e15759",  # red
    "#59a14f",  # green
    "#b07aa1",  # purple
    "#17becf",  # cyan
    "#9c755f",  # brown
    "#ff9da7",  # pink
    "#edc948",  # yellow
    "#76b7b2",  # teal
    "#1f3a93",  # navy
    "#8c564b",  # dark brown
    "#bcbd22",  # olive
    "#d62728",  # crimson
    "#7f3c8d",  # plum
    "#11a579",  # jade
)
#: Colours for names not registered, chosen by a stable hash of the name.
EXTRA_PALETTE: tuple[str, ...] = ("#3969ac", "#e68310", "#008695", "#cf1c90", "#80ba5a", "#a5aa99", "#f97b72")
#: A neutral colour for series that belong to no scheduler (a run whose scheduler is unknown).
NEUTRAL = "#7f7f7f"
#: Marker symbols of the tasks (filled: SLO met; the "-open" variant: missed).
TASK_SYMBOLS: dict[str, str] = {"chat": "circle", "code": "diamond"}
#: Bar fill patterns of a run's overall and per-task bars.
TASK_PATTERNS: dict[str, str] = {"overall": "", "chat": "/", "code": "."}
#: How much lighter each further run of a scheduler in one chart is drawn (share of white mixed in).
SHADE_STEPS: tuple[float, ...] = (0.0, 0.4, 0.6, 0.25, 0.5, 0.7)


def scheduler_colour(name: str | None) -> str:
    """The colour of scheduler ``name`` (its registered name, e.g. ``"mcsf"``), the same in every chart."""
    if not name:
        return NEUTRAL
    names = list(SCHEDULERS)
    if name in names:
        return SCHEDULER_PALETTE[names.index(name) % len(SCHEDULER_PALETTE)]
    return EXTRA_PALETTE[zlib.crc32(name.encode("utf-8")) % len(EXTRA_PALETTE)]


def lighter(colour: str, share: float) -> str:
    """``colour`` (``#rrggbb``) mixed with ``share`` (0-1) of white."""
    red, green, blue = (int(colour.lstrip("#")[i : i + 2], 16) for i in (0, 2, 4))
    mixed = (round(value + (255 - value) * share) for value in (red, green, blue))
    return "#" + "".join(f"{value:02x}" for value in mixed)


def rgba(colour: str, alpha: float) -> str:
    """``colour`` (``#rrggbb``) as a CSS ``rgba(...)`` with opacity ``alpha`` (0-1)."""
    red, green, blue = (int(colour.lstrip("#")[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgba({red},{green},{blue},{alpha})"


def run_colours(schedulers: Sequence[str | None]) -> list[str]:
    """The colour of each run of one chart, given each run's scheduler: the scheduler's colour, a
    lighter shade of it for the second, third, ... run of the same scheduler."""
    seen: dict[str | None, int] = {}
    colours = []
    for name in schedulers:
        count = seen.get(name, 0)
        seen[name] = count + 1
        colours.append(lighter(scheduler_colour(name), SHADE_STEPS[count % len(SHADE_STEPS)]))
    return colours


def task_symbol(task: str, met: bool = True) -> str:
    """The marker of a request of ``task``: filled when its SLO was met, open when missed."""
    symbol = TASK_SYMBOLS.get(task, "square")
    return symbol if met else f"{symbol}-open"
