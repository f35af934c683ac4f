"""``python -m runners check-scheduler SOURCE``: the conformance check of a scheduler policy
(runners.run.conformance) as one table; exit 0 when every contract holds, 1 when one
fails, 2 (one ``error:`` line) for bad input. Nothing is written under results/."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from runners.errors import SchedlabError


def build(parser: argparse.ArgumentParser) -> None:
    """The command's arguments (``--scheduler-path`` as every command that names schedulers)."""
    from runners.app.cli import add_scheduler_path
    from runners.run.conformance import DEFAULT_BUDGET_MS

    parser.add_argument("source", help="a Python file or module of scheduler classes, or a registered scheduler name")
    parser.add_argument("--scheduler", help="check only this scheduler of SOURCE (default: every one it defines)")
    parser.add_argument("--params", help="the policy's parameters as a JSON object, e.g. '{\"max_in_flight\": 4}'")
    parser.add_argument(
        "--budget-ms",
        type=float,
        default=DEFAULT_BUDGET_MS,
        help=f"decide-time budget, milliseconds, for the p99 at 10/100/1,000 waiting (default {DEFAULT_BUDGET_MS:g})",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the cases' workloads (default 0)")
    parser.add_argument("--json", metavar="PATH", help="also write the table as JSON to PATH")
    add_scheduler_path(parser)
    parser.set_defaults(handler=command)


def command(args: argparse.Namespace) -> int:
    """Run the check and print its table; 0 when every contract holds, else 1."""
    from runners.run.conformance import check, load_params_json

    if not args.budget_ms > 0:
        raise SchedlabError(f"--budget-ms: expected a positive number of milliseconds, got {args.budget_ms}")
    report = check(
        args.source,
        scheduler=args.scheduler,
        params=load_params_json(args.params),
        budget_ms=args.budget_ms,
        seed=args.seed,
    )
    print(report.table())
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_json(), indent=2) + "\n", encoding="utf-8")
    if report.ok:
        print("every contract holds")
        return 0
    print(f"failed: {'; '.join(report.failing())}")
    return 1
