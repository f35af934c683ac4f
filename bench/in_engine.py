"""In-engine schedulers against their client-side twins and the static baselines on the real CPU
vLLM (issue 14 item 4), as rows of the reproduction table (same statistics and verdict rule:
bench/reproduction_study.py).

Every run launches its own vLLM server (an in-engine scheduler is the server's ``--scheduler-cls``,
so arms cannot share servers), one run at a time; at each seed the arms take turns in a fixed order
(A B C A B C ...) so that drift of this shared machine hits every arm alike. All arms plan with the
bundled tiny-CPU profile (bench/results/tiny-cpu-vllm.profile.yaml). Rows ("E" in the table):

  E1  000 Table I, small KV (--num-gpu-blocks-override 24: 23 usable 128-token blocks, 2,944
      tokens) and default KV (1 GiB: memory never binds): 80 requests at once (prompt + reply
      <= 640 tokens), output throughput. static-16 (FCFS, max_num_seqs 16: "the static batch size
      vLLM is configured with"), fcfs-64, dynamic-mem (client, b_max 64) and engine-dynamic-mem
      (max_num_seqs 64).
  E2  000 Alg. 2, default KV, the same 80 requests at once: mean TPOT and output throughput of
      dynamic-sla (client) and engine-dynamic-sla with D_SLA = the profile's decode step at a
      batch of 32 (half the 64 slots; fixed from the profile before any run, not tuned), against
      fcfs-64.
  E3  003 Fig. 5: the growth of mean E2E with the number of requests n (least-squares slope over
      n = 15 / 30 / 60, Poisson 32 req/s: about twice what the engine serves, small KV): mcsf (client) and engine-mcsf against vLLM's
      own FCFS (max_num_seqs 64) and against each other.
  E4  004 Fig. 7: G with 40 requests at once, max batch 4: slo-sa (client, max_batch 4) and
      engine-slo-sa (max_batch 4 inside the engine) against FCFS with max_num_seqs 4.

Writes bench/results/in_engine.{json,md} and the E rows of results/reproduction/
reproduction_cpu-vllm.{csv,md} (the other rows untouched).

Usage: python -m bench.in_engine [--seeds 3] [--rows E1,E2,E3,E4] [--keep DIR]
(--rows a subset: those rows are measured again and replace theirs in the reports; the others stay.)
Run it under the CPU lock (about 40 minutes for every row at 3 seeds).
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import RESULTS, write_report
from bench.reproduce import COLUMNS, HEADER, OUT, PROFILE, real_notes, replace_rows, row_record_of, write
from bench.reproduction_study import (
    PILOT_BELOW_SEEDS,
    VERDICT_RULE,
    Arm,
    Claim,
    Measure,
    RowSpec,
    judge_records,
    parameters_text,
    run_rows,
)
from bench.vllm_cpu_common import tiny_model, tiny_sla_target_s, vllm_engine
from runners.study.executors import Outcome
from runners.study.runner import StudyMember

SMALL_KV = {"num_gpu_blocks_override": 24, "max_model_len": 1024}
FILTERS = {"max_total_tokens": 640}
E_REQUESTS = 80
D_COUNTS = (15, 30, 60)
#: E3's arrival rate, req/s: about twice what this engine served with the KV forced small (E1 small
#: KV, fcfs on 64 slots, 80 requests at once: 15.7-18.0 req/s at seeds 0-2, 2026-11-24), so a
#: queue builds and grows with n (003's high demand). At 8 req/s (the reproduction table's D rows)
#: no request ever waited in vLLM's queue: nothing could differ, so that setting was dropped.
D_RATE = 32.0
SLOTS = 64
TABLE_I = Claim(
    "output throughput +6.5% to +28.2% (000 Table I; abstract: 8% to 28%) over the static batch size "
    "vLLM is configured with",
    0.065,
    0.282,
)
TWIN = Claim("no paper number: the same algorithm inside the engine against its client-side twin")
NONE = Claim("no paper number")


def twin_rows(
    row: str,
    setting: str,
    baseline: Measure,
    client: Measure,
    engine: Measure,
    claim: Claim,
    also: tuple[str, ...] = (),
    against: str | None = None,
) -> list[RowSpec]:
    """The three rows of a client-side scheduler and its in-engine twin: each against ``baseline``
    (judged by ``claim``), then the twin against the client side (TWIN). Titles ``<row> <ours> vs
    <against>`` (``against``: the baseline's name in them, default its label)."""
    name = against or baseline.label
    return [
        RowSpec(f"{row} {client.label} vs {name}", setting, baseline, client, claim, also),
        RowSpec(f"{row} {engine.label} vs {name}", setting, baseline, engine, claim, also),
        RowSpec(f"{row} {engine.label} vs {client.label}", setting, client, engine, TWIN, also),
    ]


def rows_e1() -> list[RowSpec]:
    specs = []
    workload = {"requests": E_REQUESTS, "arrival": {"process": "all-at-once"}}
    for tag, label, kv in (
        ("small", "small KV (24 blocks, 2,944 tokens)", SMALL_KV),
        ("default", "default KV (1 GiB)", {}),
    ):

        def arm(name, scheduler, params, seqs, tag=tag, kv=kv):
            return Arm(f"e1-{tag}-{name}", scheduler, params, {**kv, "max_num_seqs": seqs}, workload)

        static = arm("static16", "fcfs", {}, 16)
        fcfs = arm("fcfs64", "fcfs", {}, SLOTS)
        client = arm("dynamic-mem", "dynamic-mem", {"b_max": SLOTS}, SLOTS)
        engine = arm("engine-dynamic-mem", "engine-dynamic-mem", {}, SLOTS)
        setting = (
            f"{E_REQUESTS} requests at once, {label}; static: FCFS with max_num_seqs 16; the others on "
            f"max_num_seqs {SLOTS}; eps_M and priors at registry defaults"
        )
        also = ("preemptions", "e2e_s.mean")
        key = "output_throughput_tps"
        resources = (
            f"the paper's comparison: static has 16 slots against {SLOTS}, so a gain here comes from resources "
            "(more slots), not the algorithm; the rows against fcfs 64 (same slots and KV) isolate the algorithm"
        )
        matched = "the matched baseline: FCFS with the same slots and KV, the strongest simple baseline with the same resources"
        specs += [
            RowSpec(
                f"E1 {label_of} vs fcfs 64, same slots and KV",
                setting,
                Measure("fcfs 64", (fcfs,), key=key),
                Measure(label_of, (ours,), key=key),
                TABLE_I,
                also,
                note=matched,
            )
            for label_of, ours in (("engine-dynamic-mem", engine), ("dynamic-mem", client))
        ]
        specs += [
            RowSpec(
                f"E1 {label_of} vs static max batch",
                setting,
                Measure("static 16", (static,), key=key),
                Measure(label_of, (ours,), key=key),
                TABLE_I,
                also,
                note=resources,
            )
            for label_of, ours in (("engine-dynamic-mem", engine), ("dynamic-mem", client))
        ]
        specs += [
            RowSpec(
                "E1 fcfs 64 slots vs static max batch",
                setting,
                Measure("static 16", (static,), key=key),
                Measure("fcfs 64", (fcfs,), key=key),
                Claim("no paper number: the slots alone, no algorithm (what dynamic-mem's gain must exceed)"),
                also,
            ),
            RowSpec(
                "E1 engine-dynamic-mem vs dynamic-mem",
                setting,
                Measure("dynamic-mem", (client,), key=key),
                Measure("engine-dynamic-mem", (engine,), key=key),
                TWIN,
                also,
            ),
        ]
    return specs


def rows_e2(d_sla_s: float) -> list[RowSpec]:
    workload = {"requests": E_REQUESTS, "arrival": {"process": "all-at-once"}}
    fcfs = Arm("e1-default-fcfs64", "fcfs", {}, {"max_num_seqs": SLOTS}, workload)
    # eps: a tenth of the target, as the registry's defaults (D_SLA 50 ms, eps 5 ms)
    sla = {"d_sla_s": d_sla_s, "eps_s": round(d_sla_s / 10, 6)}
    client = Arm("e2-dynamic-sla", "dynamic-sla", sla, {"max_num_seqs": SLOTS}, workload)
    engine = Arm("e2-engine-dynamic-sla", "engine-dynamic-sla", sla, {"max_num_seqs": SLOTS}, workload)
    setting = (
        f"{E_REQUESTS} requests at once, default KV, max_num_seqs {SLOTS}; D_SLA {d_sla_s * 1000:.1f} ms (the "
        f"profile's decode step at batch 32), eps {sla['eps_s'] * 1000:.2f} ms (a tenth of it, as the "
        "registry defaults' 50 / 5 ms), the rest registry defaults"
    )
    specs = []
    for key, also in (("tpot_s.mean", ("output_throughput_tps",)), ("output_throughput_tps", ("tpot_s.mean",))):
        specs += twin_rows(
            "E2",
            setting,
            Measure("fcfs 64", (fcfs,), key=key),
            Measure("dynamic-sla", (client,), key=key),
            Measure("engine-dynamic-sla", (engine,), key=key),
            Claim("no paper number at one load: 000 Table II reports capacity under the SLA"),
            also,
            against="fcfs",
        )
    return specs


def rows_e3() -> list[RowSpec]:
    def arms(name: str, scheduler: str) -> tuple[Arm, ...]:
        # 003's premise, as the setting says: MC-SF knows each request's length (an oracle,
        # labelled as one; the registry default is now the leak-free per-task Gaussian)
        params = {"output_predictor": "oracle"} if "mcsf" in scheduler else {}
        return tuple(
            Arm(
                f"e3-{name}-n{n}",
                scheduler,
                params,
                {**SMALL_KV, "max_num_seqs": SLOTS},
                {"requests": n, "arrival": {"process": "poisson", "rate": D_RATE}},
            )
            for n in D_COUNTS
        )

    fcfs, client, engine = (
        Measure(label, arms(name, scheduler), "slope", "e2e_s.mean", D_COUNTS)
        for label, name, scheduler in (
            ("vLLM fcfs", "fcfs", "fcfs"),
            ("mcsf", "mcsf", "mcsf"),
            ("engine-mcsf", "engine-mcsf", "engine-mcsf"),
        )
    )
    setting = (
        f"Poisson {D_RATE:g}/s, small KV (24 blocks, 2,944 tokens), n = {' / '.join(map(str, D_COUNTS))}, "
        f"max_num_seqs {SLOTS}; MC-SF with the oracle (each request's target length)"
    )
    claim = Claim(
        "lower latency growth with load than the baselines (003 Fig. 5: the best baseline's slope about "
        "3x MC-SF's at high demand); the paper's baselines are the alpha policies, vLLM's FCFS is ours"
    )
    return twin_rows("E3", setting, fcfs, client, engine, claim)


def rows_e4() -> list[RowSpec]:
    workload = {"requests": 40, "arrival": {"process": "all-at-once"}}
    fcfs = Arm("e4-fcfs", "fcfs", {}, {"max_num_seqs": 4}, workload)
    client = Arm("e4-slo-sa", "slo-sa", {"max_batch": 4}, {"max_num_seqs": SLOTS}, workload)
    engine = Arm("e4-engine-slo-sa", "engine-slo-sa", {"max_batch": 4}, {"max_num_seqs": SLOTS}, workload)
    setting = (
        "40 requests at once, max batch 4 (fcfs: max_num_seqs 4; slo-sa: max_batch 4, the client holds the "
        "rest; engine-slo-sa: running limit 4 inside vLLM); registry defaults otherwise"
    )
    claim = Claim("G +0.3% to +46.5% over vLLM (004 Fig. 7)", 0.003, 0.465)
    also = ("slo_attainment", "e2e_s.mean")
    return twin_rows(
        "E4",
        setting,
        Measure("fcfs", (fcfs,)),
        Measure("slo-sa", (client,)),
        Measure("engine-slo-sa", (engine,)),
        claim,
        also,
    )


ROWS = {"E1": rows_e1, "E2": lambda: rows_e2(tiny_sla_target_s()), "E3": rows_e3, "E4": rows_e4}


def take_turns(members: list[StudyMember]) -> list[StudyMember]:
    """The planned runs ordered seed by seed, the arms in their planned order within a seed."""
    order = {member.run_id: index for index, member in enumerate(members)}
    return sorted(members, key=lambda member: (member.seed, order[member.run_id]))


def merge_into_reproduction(rows: list[dict[str, Any]]) -> None:
    """Replace the E rows of reproduction_cpu-vllm.{csv,md} with ``rows`` (other rows untouched)."""
    name = "cpu-vllm"
    meta = json.loads((OUT / f"reproduction_{name}.json").read_text())
    merged = replace_rows(name, rows, ("E",))
    meta["in_engine"] = {"command": "python -m bench.in_engine", "date": time.strftime("%Y-%m-%d")}
    (OUT / f"reproduction_{name}.json").write_text(json.dumps(meta, indent=2) + "\n")
    made = re.search(r"^Made by `.*` on (\S+) ", (OUT / f"reproduction_{name}.md").read_text(), re.MULTILINE)
    write(
        merged,
        name,
        meta["command"],
        meta["seconds"],
        real_notes(meta),
        meta["problems"],
        made_on=made[1] if made else None,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rows", default=",".join(ROWS), help="which rows (comma-separated: E1,E2,E3,E4)")
    parser.add_argument("--keep", help="keep the runs and server logs in this folder")
    args = parser.parse_args()
    chosen = [name.strip() for name in args.rows.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(ROWS))
    if unknown:
        raise SystemExit(f"--rows: unknown {unknown}; known: {', '.join(ROWS)}")
    seeds = list(range(args.seeds))
    specs = [spec for name in chosen for spec in ROWS[name]()]
    started = time.perf_counter()
    problems: list[str] = []

    def on_finish(member: StudyMember, outcome: Outcome) -> None:
        status, summary, error = outcome
        failed = (summary.failed if summary is not None else None) or 0
        if status != "done" or failed:
            problems.append(f"{member.run_id}: {status}, {failed} failed {error or ''}".strip())
        print(f"  [{member.run_id}: {status}]", flush=True)

    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(args.keep) if args.keep else Path(scratch_dir)
        model = tiny_model(scratch / "tiny")
        workload_extra = {"tokenizer": str(model), "filters": FILTERS}

        def config_for(arm: Arm) -> dict[str, Any]:
            config: dict[str, Any] = {
                "engine": vllm_engine(model, profile=str(PROFILE), **arm.engine),
                "workload": {**workload_extra, **arm.workload},
                "max_duration_s": 900,
                "scheduler": {"name": arm.scheduler, "params": dict(arm.params)},
            }
            if arm.slo:
                config["slo"] = dict(arm.slo)
            return config

        table, results = run_rows(
            specs, seeds, config_for, scratch / "results", prepare=take_turns, on_finish=on_finish
        )
    seconds = time.perf_counter() - started
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "seeds": seeds,
        "rows": chosen,
        "seconds": round(seconds, 1),
        "runs": len(results.outcomes),
        "problems": problems,
        "parameters": parameters_text(specs),
        "table": table,
        "measured": {name: time.strftime("%Y-%m-%d %H:%M") for name in chosen},
    }
    previous_path = RESULTS / "in_engine.json"
    if set(chosen) != set(ROWS) and previous_path.exists():  # a subset: keep the other rows as measured
        previous = json.loads(previous_path.read_text())
        if previous.get("seeds") == seeds:
            kept = [row for row in previous.get("table", []) if row["scenario"].split()[0] not in chosen]
            table = sorted(kept + table, key=lambda row: list(ROWS).index(row["scenario"].split()[0]))
            report.update(
                table=table,
                rows=sorted({row["scenario"].split()[0] for row in table}),
                runs=previous.get("runs", 0),
                seconds=previous.get("seconds", 0.0),
                parameters=parameters_text([spec for name in ROWS for spec in ROWS[name]()]),
                measured={
                    **previous.get("measured", {name: previous.get("date", "") for name in previous.get("rows", [])}),
                    **report["measured"],
                },
                problems=previous.get("problems", []) + problems,
            )
            problems = report["problems"]
    records = [row_record_of(row) for row in table]
    pilot = len(seeds) < PILOT_BELOW_SEEDS
    if all(record is not None for record in records):  # every row judged by the current rule
        table = judge_records([record for record in records if record is not None], pilot)
        report["table"] = table
    lines = [
        "# In-engine schedulers vs their client-side twins and static baselines (bench/in_engine.py)",
        "",
        f"CPU vLLM 0.32.0, tiny model; seeds {seeds}; every run on a freshly launched server, the arms taking "
        "turns at each seed. Measured: "
        + ", ".join(f"{name} {when}" for name, when in report["measured"].items())
        + ". Every E row is a supporting row (the paper claims are the B-D claim rows of "
        "results/reproduction/reproduction_cpu-vllm.md): judged on its unadjusted p."
        + (
            f" A pilot: fewer than {PILOT_BELOW_SEEDS} seeds on a real engine, so no row counts as reproduced."
            if pilot
            else ""
        ),
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "---|" * len(HEADER),
    ]
    for row in table:
        lines.append("| " + " | ".join(str(row.get(key, "")).replace("|", "/") for key in COLUMNS) + " |")
    lines += [
        "",
        VERDICT_RULE,
        "",
        "Parameters (registry defaults unless the setting says otherwise):",
        "",
        report["parameters"],
        "",
    ]
    if problems:
        lines += ["## Problems", ""] + [f"- {problem}" for problem in problems]
    write_report("in_engine", report, lines)
    merge_into_reproduction(table)


if __name__ == "__main__":
    main()
