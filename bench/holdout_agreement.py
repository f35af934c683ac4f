"""Do the reproduction table's verdicts hold on seeds it never used? (issue 25, "Done when")

Reads two tables' per-seed files (``results/reproduction/reproduction_<name>.seeds.json``, written
by bench/reproduce.py): the main table and a check made with ``--first-seed`` on seeds the main
table never saw (the check's first seed was not chosen by us: SHA-256 of issue 25's title modulo
10^6 = 78480, so seeds 78480-78509). Both are judged with the same rule
(bench/reproduction_study.judge_records). For every row the main table calls **reproduced** or
**direction only** (claim and supporting rows alike), the check must agree in direction: its
mean paired difference ours - baseline on the same side of zero, in the quantity's good direction
(a claim of "at most X% worse" is a bound, not a direction, and is listed apart). The report
lists each such row with both changes, the check's verdict, and whether the direction held.

Writes bench/results/holdout_agreement.{json,md}.

Usage: python -m bench.holdout_agreement [--main simulator] [--check simulator-seeds78480-78509]
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from bench.common import markdown_table, write_report
from bench.reproduce import OUT
from bench.reproduction_study import judge_records

DIRECTIONAL = ("reproduced", "on the boundary", "direction only")


def load_records(name: str) -> tuple[list[dict[str, Any]], bool]:
    """The row records of table ``name`` and whether it is a pilot."""
    data = json.loads((OUT / f"reproduction_{name}.seeds.json").read_text())
    return list(data["rows"]), bool(data.get("pilot"))


def agreement(main: str, check: str) -> dict[str, Any]:
    """Every directional row of ``main`` set against the same row of ``check`` (by row id)."""
    main_records, main_pilot = load_records(main)
    check_records, check_pilot = load_records(check)
    main_rows = {record["id"]: row for record, row in zip(main_records, judge_records(main_records, main_pilot))}
    check_rows = {record["id"]: row for record, row in zip(check_records, judge_records(check_records, check_pilot))}
    kinds = {record["id"]: record["claim"].get("kind", "gain") for record in main_records}
    higher_of = {record["id"]: bool(record["quantity"]["higher_is_better"]) for record in main_records}
    rows = []
    for row_id, row in main_rows.items():
        if not str(row["verdict"]).startswith(DIRECTIONAL):
            continue
        other = check_rows.get(row_id)
        higher = higher_of[row_id]
        main_diff = row["diff_mean"]
        check_diff = None if other is None else other["diff_mean"]
        bound = kinds.get(row_id) == "at-most-worse"
        held = None
        if check_diff is not None and main_diff is not None and not bound:
            held = (check_diff > 0) == higher and check_diff != 0
        rows.append(
            {
                "id": row_id,
                "scenario": row["scenario"],
                "role": row["role"],
                "main_verdict": row["verdict"],
                "main_change": row["change"],
                "check_change": None if other is None else other["change"],
                "check_verdict": None if other is None else other["verdict"],
                "direction_held": held,
            }
        )
    judged = [row for row in rows if row["direction_held"] is not None]
    return {
        "main": main,
        "check": check,
        "rows": rows,
        "directional_rows": len(rows),
        "held": sum(1 for row in judged if row["direction_held"]),
        "judged": len(judged),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--main", default="simulator")
    parser.add_argument("--check", default="simulator-seeds78480-78509")
    args = parser.parse_args()
    report = agreement(args.main, args.check)
    header = ["scenario", "role", "verdict (main)", "change (main)", "change (check)", "verdict (check)", "held"]
    table = []
    for row in report["rows"]:
        held = {True: "yes", False: "**NO**", None: "(a bound)"}[row["direction_held"]]
        table.append(
            [
                row["scenario"],
                row["role"],
                row["main_verdict"],
                row["main_change"],
                row["check_change"] or "-",
                row["check_verdict"] or "-",
                held,
            ]
        )
    lines = [
        "# Reproduction verdicts on unused seeds",
        "",
        f"Main table `{args.main}`, check `{args.check}` (python -m bench.holdout_agreement). Of the "
        f"{report['directional_rows']} rows the main table calls reproduced, on the boundary or direction only, {report['held']} of "
        f"{report['judged']} keep their direction on the check's seeds (rows judged against a bound are listed, "
        "not counted).",
        "",
        *markdown_table(header, table),
    ]
    write_report("holdout_agreement", report, lines)


if __name__ == "__main__":
    main()
