"""Reproduce the papers' comparisons with our schedulers, with 95% intervals over paired seeds and a
verdict per row (issue 11), on the simulator (Qwen2.5-7B preset) and, with --real, on the CPU vLLM
(tiny model, KV forced small).

Writes results/reproduction/reproduction_<engine>.md, .csv, .json (how the table was made: the
command, the scale, the date) and .seeds.json (every row's identity and per-seed values, from which
--render recomputes every row). Every row is a paired study (bench/reproduction_study.py on
runners.study.runner / runners.study.executors / runners.metrics.seed_statistics): at each seed both sides get
the identical workload and arrival times; the row states its role (the one **claim** row of a paper
claim, or a **supporting** row), the baseline's and our mean with 95% intervals, the mean change
(relative; Fieller's interval below 10 seeds, BCa from 10), the paired difference (Student t
interval), k of n seeds better, the paired test's p (Holm-adjusted over the table's claim rows),
and the verdict with its reason. Rows (which is each claim's row: the row builders say, and why):

  A      slo-sa vs FCFS (004 Fig. 7): G with 10/20/40 requests at once x max batch 1/2/4 (the
         engine's max_num_seqs is the max batch for both); slo-sa with registry defaults
         (dispatch 'slots'), and with the paper's protocol (dispatch 'all' on a priority engine,
         one annealing chain) in the Fig. 8/9 settings; the oracle and noisy-oracle predictor
         (004 Fig. 9, noise 2.5 / 5 / 10%) with 40 requests at max batch 4; slo-sa planning with
         a 10% error on its latency model against none (004 Fig. 10: G falls by at most 1.9%).
  B      dynamic-mem vs FCFS with the same slots and KV (000 Table I): all requests at once,
         output throughput, where memory binds (KV 60,000 tokens: the claim row) and where it does
         not (KV 400,000); and the paper's own comparison, against a static max batch of 256 of
         the 1,024 slots (supporting: that gain comes from the slots, not the algorithm).
         dynamic-sla vs static (000 Table II): capacity = the highest arrival rate (swept in steps
         of 0.5 req/s) at which >= 90% of requests meet TPOT <= 50 ms AND TTFT <= 10 s, per seed
         (runners.views.compare.capacity_at: every lower rate must meet it too; linear between the last
         rate that meets it and the first that does not).
  C      scls vs static batching (SLS), vs FCFS with a cap of 16 in flight (ILS) and vs uncapped
         FCFS (001): request throughput and mean response time, Poisson arrivals, 2 instances.
  D      mcsf vs alpha-protect and alpha-beta-clear (003 Fig. 5): the least-squares slope of mean
         E2E over n, per seed, at a high and a low arrival rate: one claim row per rate against
         the best of the eight baseline settings at each seed, and one supporting row per
         setting. A run that livelocks ends failed ('stalled: ...'); such a baseline is reported
         as "livelocks (as the paper describes)" and left out of the best at that seed.
  Baton  continuous insertion vs static batches on a run-to-completion engine with the same B
         slots (002 Table 2): 30 short queries at once, request throughput (= completion-time
         ratio), B = 2..10.

Verdict, one rule (bench/reproduction_study.VERDICT_RULE, quoted in the tables' notes): the paired
test's p (exact sign-flip below 10 seeds, paired t from 10), Holm-adjusted over the table's claim
rows; inconclusive when p >= 0.05, not reproduced when significant and ours worse; significant and
ours better: reproduced when the relative change's 95% interval overlaps the paper's range, direction
only when it lies wholly below or above it (or the paper gives no number). A real-engine table with
fewer than 10 seeds is a pilot and counts no row as reproduced.

No parameter was tuned to the papers' numbers: registry defaults unless a row's setting says
otherwise (the paper's own values: max batch, D_SLA, Gamma, noise levels, KV size).

--real runs the same rows scaled down (the scale is in the table's notes) against the CPU vLLM on
the tiny random Llama, >= 3 seeds: three server settings are launched once each and every run
attaches to them, one run at a time. With fewer than 10 seeds it is a pilot table. It needs the vLLM environment (SCHEDLAB_VLLM_PYTHON or
.venv-vllm) and bench/results/tiny-cpu-vllm.profile.yaml, the fitted latency profile the
model-based policies plan with.

Usage: python -m bench.reproduce [--seeds 10] [--workers N] [--quick]
       python -m bench.reproduce --real [--seeds 3] [--model /tmp/tiny] [--keep DIR]
       python -m bench.reproduce --render NAME   (recompute every row of reproduction_NAME from its
                                                  .seeds.json and rewrite the .md and .csv)
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import ROOT
from bench.reproduction_study import (
    PILOT_BELOW_SEEDS,
    VERDICT_RULE,
    Arm,
    Claim,
    Measure,
    Role,
    RowSpec,
    best_of,
    holm_text,
    judge_records,
    parameters_text,
    run_rows,
    seeds_file_text,
    tally_text,
    without_warmup,
)
from bench.vllm_cpu_common import TINY_PROFILE, launched_vllm, tiny_model, tiny_sla_target_s
from runners.study.executors import Outcome
from runners.study.plan import StudyMember

OUT = ROOT / "results" / "reproduction"
PROFILE = TINY_PROFILE

#: 004's Fig. 7 range of G gains over vLLM (4-10 requests, max batch 1/2/4).
A_CLAIM = Claim(
    "G +0.3% to +46.5% over vLLM (004 Fig. 7); attainment up to 5x, latency up to -31.6% (appendix)", 0.003, 0.465
)
#: The one (requests, max batch) of A's grid that is 004 Fig. 7's claim row; the other cells are
#: supporting. Fixed from the paper's settings before any result was read: 10 requests is the only
#: count of our grid inside Fig. 7's 4-10, and the largest the paper ran; max batch 4 is the
#: largest batch it ran, the one closest to how vLLM (its baseline) serves by default (it batches
#: whatever fits; batch 1 is no batching at all). slo-sa runs there at registry defaults.
A_CLAIM_SETTING = (10, 4)
#: 004 Fig. 10: G with an error in the latency model the policy plans with, against none.
PLANNING_ERROR = 0.1
#: 002 Table 2: B -> (Benchmark, Baton) completion time of the 30 short queries, seconds.
BATON_TABLE = {2: (161.77, 83.43), 4: (92.68, 49.61), 6: (61.70, 37.25), 8: (50.07, 31.08), 10: (40.45, 30.99)}
#: The B of 002 Table 2's claim row (the others supporting): 6, the middle of the paper's five
#: B values, so neither its best case (B = 2, x1.94) nor its worst (B = 10, x1.31); fixed from the
#: paper's table before any result was read.
BATON_CLAIM_B = 6
#: 002's "short input - short output": both a few dozen to 200 words (~266 tokens at 0.75 words a token).
BATON_FILTERS = {"min_input_tokens": 24, "max_input_tokens": 266, "min_output_tokens": 24, "max_total_tokens": 532}

#: The simulator table's settings (--quick: QUICK_SCALE).
SIM_SCALE: dict[str, Any] = {
    "seeds": 10,
    "a_counts": (10, 20, 40),
    "a_batches": (1, 2, 4),
    "a_protocol": ((10, 1), (20, 2), (40, 4)),  # the paper's protocol: Fig. 8 / 9 settings
    "a_oracle": (40, 4),  # also the Fig. 10 (planning error) row's setting
    "a_noise": (0.025, 0.05, 0.10),  # Fig. 9 (C)
    "b_requests": 1000,
    "b_kv": 400_000,  # memory does not bind (no preemption at 1,024 slots)
    "b_kv_tight": 60_000,  # memory binds: the 000 Table I claim row
    "b_slots": 1024,
    "b_static": (256,),  # the paper's static baseline: vLLM's configured 256 of the 1,024 slots
    "b_rates": tuple(x / 2 for x in range(1, 17)),
    "b_sla_requests": 400,
    "b_tpot_s": 0.05,  # the paper's D_SLA and TPOT bound
    "b_ttft_s": 10.0,
    "c_requests": 600,
    "c_rate": 8.0,
    "c_instances": 2,
    "c_cap": 16,
    "d_counts": (100, 200, 400),
    "d_rates": (("high", 8.0), ("low", 3.0)),
    "d_kv": 16_492,
    "baton_requests": 30,
    "baton_batches": (2, 4, 6, 8, 10),
    "baton_filters": BATON_FILTERS,
}
QUICK_SCALE: dict[str, Any] = {
    **SIM_SCALE,
    "seeds": 3,
    "a_counts": (10,),
    "a_batches": (4,),  # the claim cell, A_CLAIM_SETTING
    "a_protocol": ((10, 4),),
    "a_oracle": (10, 4),
    "a_noise": (0.05,),
    "b_requests": 120,
    "b_kv": 40_000,
    "b_kv_tight": 6_000,  # the simulator's 60,000 / 400,000, times the quick 40,000
    "b_slots": 128,
    "b_static": (32,),
    "b_rates": (2.0, 2.5, 3.0),
    "b_sla_requests": 60,
    "c_requests": 80,
    "d_counts": (20, 40),
    "d_rates": (("high", 8.0),),
    "d_kv": 4_096,
    "baton_requests": 12,
    "baton_batches": (2, BATON_CLAIM_B),
}


# -- the rows --------------------------------------------------------------------------------------
def g_row(
    scenario: str,
    setting: str,
    base: Arm,
    ours: Arm,
    claim: Claim,
    label: str,
    role: Role = "supporting",
    note: str = "",
) -> RowSpec:
    return RowSpec(
        scenario,
        setting,
        Measure(base.scheduler, (base,), key="G"),
        Measure(label, (ours,), key="G"),
        claim,
        also=("slo_attainment", "e2e_s.mean"),
        role=role,
        note=note,
    )


def rows_a(scale: dict[str, Any], protocol: bool = True, planning: bool = True) -> list[RowSpec]:
    """004: slo-sa vs FCFS on G, all requests at once, the paper's SLOs (chat TTFT 10 s and TPOT
    50 ms; code E2E 30 s), 1:1 chat:code. Claim rows: Fig. 7 at :data:`A_CLAIM_SETTING`; Fig. 9's
    oracle against vLLM (+84%) and against slo-sa's own predictor (+65%); Fig. 10 (``planning``:
    the simulator only, the engine's latency model is the truth there) G with a 10% planning error
    against none. Supporting: the other Fig. 7 cells, the paper's protocol, the noisy oracles."""
    rows = []

    def fcfs(n: int, b: int) -> Arm:
        return Arm(f"a-n{n}-b{b}-fcfs", "fcfs", {}, {"max_num_seqs": b}, workload(n))

    def slo_sa(n: int, b: int, tag: str = "", engine: dict[str, Any] | None = None, **params: Any) -> Arm:
        settings = {
            "max_num_seqs": b,
            **({"scheduling_policy": "priority"} if params.get("dispatch") == "all" else {}),
            **(engine or {}),
        }
        return Arm(f"a-n{n}-b{b}-slo-sa{tag}", "slo-sa", {"max_batch": b, **params}, settings, workload(n))

    def workload(n: int) -> dict[str, Any]:
        return {"requests": n, "arrival": {"process": "all-at-once"}}

    for b in scale["a_batches"]:
        for n in scale["a_counts"]:
            claim_row = (n, b) == A_CLAIM_SETTING
            rows.append(
                g_row(
                    "A slo-sa vs fcfs",
                    f"{n} requests at once, max batch {b} (engine max_num_seqs {b}); "
                    "slo-sa registry defaults (dispatch slots, 2 chains, calibration-warmed Gaussian)",
                    fcfs(n, b),
                    slo_sa(n, b),
                    A_CLAIM,
                    "slo-sa",
                    "claim" if claim_row else "supporting",
                    ""
                    if claim_row
                    else f"another Fig. 7 cell (the claim row is {A_CLAIM_SETTING[0]} requests at "
                    f"max batch {A_CLAIM_SETTING[1]})",
                )
            )
    if protocol:
        for n, b in scale["a_protocol"]:
            rows.append(
                g_row(
                    "A slo-sa (paper protocol) vs fcfs",
                    f"{n} requests at once, max batch {b}; slo-sa dispatch 'all' (every request sent at "
                    "once in plan order) on a priority engine, 1 annealing chain (the paper's); FCFS on "
                    "the FCFS engine (vLLM's default)",
                    fcfs(n, b),
                    slo_sa(n, b, "-paper", dispatch="all", chains=1),
                    A_CLAIM,
                    "slo-sa (paper protocol)",
                    note="the paper's protocol, an ablation of the claim row's registry defaults",
                )
            )
    n, b = scale["a_oracle"]
    oracle = slo_sa(n, b, "-oracle", output_predictor="oracle")
    rows.append(
        g_row(
            "A slo-sa oracle vs fcfs",
            f"{n} requests at once, max batch {b}; slo-sa predicts each "
            "output length exactly (output_predictor oracle: an oracle, as the paper's)",
            fcfs(n, b),
            oracle,
            Claim("G +84% over vLLM with an output-length error < 2.5% (004 Fig. 9 C)", 0.84, 0.84),
            "slo-sa oracle",
            "claim",
        )
    )
    rows.append(
        g_row(
            "A slo-sa oracle vs slo-sa",
            f"{n} requests at once, max batch {b}; the oracle against slo-sa's own per-task Gaussian "
            "(calibration-warmed)",
            slo_sa(n, b),
            oracle,
            Claim("G +65% over the SLO-aware scheduler's own predictor, error < 2.5% (004 Fig. 9 C)", 0.65, 0.65),
            "slo-sa oracle",
            "claim",
        )
    )
    for noise in scale["a_noise"]:
        rows.append(
            g_row(
                f"A slo-sa noisy oracle {noise:.1%} vs fcfs",
                f"{n} requests at once, max batch {b}; prediction = true length x (1 + N(0, {noise:g})) "
                "(output_predictor noisy-oracle)",
                fcfs(n, b),
                slo_sa(n, b, f"-noisy{noise:g}", output_predictor="noisy-oracle", noise=noise),
                Claim(
                    "G gain over vLLM grows with accuracy (004 Fig. 9 C: 2.5/5/10% error; numbers only in the figure)"
                ),
                f"slo-sa noisy {noise:.1%}",
            )
        )
    if planning:
        # 004 Fig. 10 varies the error of the latency model the scheduler plans with, measured from
        # the truth: both arms plan with the simulated engine's own model (planning_model
        # engine-truth, an oracle), one with a seeded 10% multiplicative error on each coefficient.
        # A claim row: the paper's claim that G falls by at most 1.9%, judged against that bound
        # (Claim kind at-most-worse), not as a gain.
        truth = {"planning_model": "engine-truth"}
        exact = slo_sa(n, b, "-plan-exact", {**truth, "planning_error": 0.0})
        erring = slo_sa(n, b, f"-plan-err{PLANNING_ERROR:g}", {**truth, "planning_error": PLANNING_ERROR})
        rows.append(
            g_row(
                "A slo-sa planning error vs exact",
                f"{n} requests at once, max batch {b}; both plan with the engine's own latency model "
                f"(planning_model engine-truth: an oracle), one with planning_error {PLANNING_ERROR:g} (a seeded "
                f"{PLANNING_ERROR:.0%} multiplicative error on each latency coefficient)",
                exact,
                erring,
                Claim(
                    "G falls by at most 1.9% with an error in the latency model (004 Fig. 10)",
                    -0.019,
                    0.0,
                    kind="at-most-worse",
                ),
                f"slo-sa planning error {PLANNING_ERROR:.0%}",
                "claim",
            )
        )
    return rows


def rows_b_memory(scale: dict[str, Any], kv_tokens: int | None, tight: bool) -> list[RowSpec]:
    """000 Table I: dynamic-mem vs FCFS, all requests at once, output throughput, with KV
    ``kv_tokens`` (None: the engine's default). The baseline that isolates the algorithm is FCFS
    with the SAME slots (max_num_seqs) and KV as dynamic-mem, the strongest simple baseline with
    the same resources. ``tight``: memory binds at this KV; that matched row is the claim row,
    because 000's claim is about serving where memory limits the batch (dynamic-mem sizes the
    batch to the free KV; where memory never binds there is nothing for it to adapt to). Not
    tight: the matched row and the paper's own comparison (FCFS with vLLM's configured static
    max_num_seqs, fewer slots than dynamic-mem's) are supporting."""
    requests, slots = scale["b_requests"], scale["b_slots"]
    workload = {"requests": requests, "arrival": {"process": "all-at-once"}}
    kv = {"kv_capacity_tokens": kv_tokens} if kv_tokens is not None else {}
    kv_text = f"KV {kv_tokens:,} tokens" if kv_tokens is not None else "KV: the server's default"
    tag = "b-memtight" if tight else "b-mem"
    dynamic = Arm(f"{tag}-dynamic", "dynamic-mem", {"b_max": slots}, {**kv, "max_num_seqs": slots}, workload)
    table_one = Claim(
        "output throughput +6.5% to +28.2% (000 Table I; abstract: 8% to 28%) over the static batch size vLLM "
        "is configured with",
        0.065,
        0.282,
    )
    matched = Arm(f"{tag}-static{slots}", "fcfs", {}, {**kv, "max_num_seqs": slots}, workload)
    rows = [
        RowSpec(
            "B dynamic-mem vs fcfs, same slots and KV",
            f"{requests} requests at once, {kv_text} ({'memory binds' if tight else 'memory does not bind'}); "
            f"FCFS with max_num_seqs {slots} and dynamic-mem with b_max {slots} on max_num_seqs {slots}, "
            "eps_M and prior at registry defaults",
            Measure(f"fcfs {slots} slots", (matched,), key="output_throughput_tps"),
            Measure("dynamic-mem", (dynamic,), key="output_throughput_tps"),
            table_one,
            also=("preemptions", "e2e_s.mean"),
            role="claim" if tight else "supporting",
            note="the matched baseline: FCFS with the same slots and KV, the strongest simple baseline with the "
            "same resources"
            + ("" if tight else "; memory does not bind here (the claim row is the one where it does)"),
        )
    ]
    if tight:
        return rows
    for static in scale["b_static"]:
        base = Arm(f"b-mem-static{static}", "fcfs", {}, {**kv, "max_num_seqs": static}, workload)
        rows.append(
            RowSpec(
                "B dynamic-mem vs static max batch (the paper's)",
                f"{requests} requests at once, {kv_text}; static: FCFS with max_num_seqs {static}; dynamic-mem: "
                f"b_max {slots} on max_num_seqs {slots}, eps_M and prior at registry defaults",
                Measure(f"static {static}", (base,), key="output_throughput_tps"),
                Measure("dynamic-mem", (dynamic,), key="output_throughput_tps"),
                table_one,
                also=("preemptions", "e2e_s.mean"),
                note=f"the paper's comparison: the static baseline has {static} slots against dynamic-mem's "
                f"{slots}, so a gain here comes from resources (more slots), not the algorithm; the matched "
                "rows (same slots and KV) isolate the algorithm",
            )
        )
    return rows


def rows_b_sla(scale: dict[str, Any]) -> list[RowSpec]:
    """000 Table II: capacity under a decode SLA (TPOT <= 50 ms) and a TTFT bound; one row, the
    claim's (both sides on the engine's default slots and KV: the same resources)."""
    tpot, ttft, rates = scale["b_tpot_s"], scale["b_ttft_s"], tuple(scale["b_rates"])
    slo = {"preset": "custom", "chat": {"tpot_s": tpot, "ttft_s": ttft}, "code": {"tpot_s": tpot, "ttft_s": ttft}}
    workload = {"requests": scale["b_sla_requests"], "arrival": {"process": "poisson"}}
    static = Arm("b-sla-static", "fcfs", {}, {}, workload, slo, rates)
    # eps a tenth of D_SLA: the registry defaults' 50 / 5 ms
    sla = {"d_sla_s": tpot} if tpot == SIM_SCALE["b_tpot_s"] else {"d_sla_s": tpot, "eps_s": round(tpot / 10, 6)}
    dynamic = Arm("b-sla-dynamic", "dynamic-sla", sla, {}, workload, slo, rates)
    step = rates[1] - rates[0] if len(rates) > 1 else 0.0
    return [
        RowSpec(
            "B dynamic-sla vs static (capacity)",
            f">= 90% of {scale['b_sla_requests']} requests with TPOT <= {tpot * 1000:g} ms and TTFT <= {ttft:g} s; "
            f"Poisson rates {rates[0]:g} to {rates[-1]:g} req/s in steps of {step:g}; static: FCFS on the engine's "
            f"default max_num_seqs; dynamic-sla: D_SLA {tpot * 1000:g} ms"
            + ("" if "eps_s" not in sla else f", eps {sla['eps_s'] * 1000:g} ms")
            + ", the rest registry defaults",
            Measure("static", (static,), "capacity", "slo_attainment"),
            Measure("dynamic-sla", (dynamic,), "capacity", "slo_attainment"),
            Claim("capacity +22% (5.4 -> 6.6 qps; 000 Table II rows +10% to +27%)", 0.10, 0.27),
            role="claim",
        )
    ]


def rows_c(scale: dict[str, Any]) -> list[RowSpec]:
    """001: scls vs SLS (static batches of 16), ILS (FCFS, at most 16 in flight) and uncapped FCFS.
    Claim rows: throughput and mean response time against SLS and against ILS (the paper's four
    claims); the uncapped FCFS rows are supporting: the matched strongest simple baseline (the
    paper's ILS is capped at 16), without a paper number."""
    cap, instances = scale["c_cap"], scale["c_instances"]
    workload = {"requests": scale["c_requests"], "arrival": {"process": "poisson", "rate": scale["c_rate"]}}
    engine = {"instances": instances}
    scls = Arm("c-scls", "scls", {}, engine, workload)
    uncapped_note = (
        f"the uncapped baseline: FCFS without the ILS cap of {cap}, the matched strongest simple baseline with "
        "the same resources (the paper's ILS was capped)"
    )
    baselines: tuple[tuple[Arm, str, Claim, Claim, Role, str], ...] = (
        (
            Arm("c-static", "static", {"batch_size": cap}, engine, workload),
            f"static B={cap} (SLS)",
            Claim("throughput +82.5% to +315.8% vs SLS (001 Fig. 12, HF and DS)", 0.825, 3.158),
            Claim("mean response time -80.8% to -91.1% vs SLS (001 Fig. 12)", -0.911, -0.808),
            "claim",
            "",
        ),
        (
            Arm("c-fcfs-cap", "fcfs", {"max_in_flight": cap}, engine, workload),
            f"fcfs cap {cap} (ILS)",
            Claim("throughput +61.6% to +171.0% vs ILS (001 Fig. 12, DS)", 0.616, 1.71),
            Claim("mean response time -78.4% to -88.3% vs ILS (001 Fig. 12)", -0.883, -0.784),
            "claim",
            "",
        ),
        (
            Arm("c-fcfs", "fcfs", {}, engine, workload),
            "fcfs uncapped",
            Claim(
                "no paper number: the paper has no uncapped continuous-batching baseline (direction of its ILS claim)"
            ),
            Claim("no paper number (direction of its ILS claim)"),
            "supporting",
            uncapped_note,
        ),
    )
    setting = (
        f"{scale['c_requests']} requests, Poisson {scale['c_rate']:g}/s, {instances} instances; scls at "
        "registry defaults"
    )
    rows = []
    for arm, label, throughput, latency, role, note in baselines:
        for key, claim, also in (
            ("request_throughput_rps", throughput, ()),
            ("e2e_s.mean", latency, ("e2e_s.p90",)),
        ):
            rows.append(
                RowSpec(
                    f"C scls vs {label}",
                    setting,
                    Measure(label, (arm,), key=key),
                    Measure("scls", (scls,), key=key),
                    claim,
                    also,
                    role,
                    note,
                )
            )
    return rows


#: 003's baselines as the paper ran them. The seed text lost the paper's values: alpha-protect at
#: a grid of alphas around the smallest that avoids the clear-all loop (the paper's 0.1 step), and
#: alpha-beta-clear at alpha 0.1 / 0.2 x beta 0.1 / 0.2 (its Figs. 9-10 range); both clear on overflow.
D_BASELINES: tuple[tuple[str, dict[str, Any]], ...] = (
    *(("alpha-protect", {"alpha": alpha}) for alpha in (0.1, 0.2, 0.25, 0.3)),
    *(("alpha-beta-clear", {"alpha": alpha, "beta": beta}) for alpha in (0.1, 0.2) for beta in (0.1, 0.2)),
)


def rows_d(scale: dict[str, Any], kv_tokens: int) -> list[RowSpec]:
    """003: the slope of mean E2E over the number of requests n. 003 claims MC-SF against the
    *best* baseline, so per demand level ONE claim row: mcsf against the best (lowest) slope of
    the eight alpha baseline settings at each seed (a setting that livelocks at a seed, as the
    paper describes, is left out at that seed); the eight per-setting rows are supporting."""
    counts = tuple(scale["d_counts"])
    rows = []
    for label, rate in scale["d_rates"]:

        def arms(name: str, params: dict[str, Any], label=label, rate=rate) -> tuple[Arm, ...]:
            tag = "-".join(
                f"{key}{value:g}" if isinstance(value, (int, float)) else str(value) for key, value in params.items()
            )
            return tuple(
                Arm(
                    f"d-{label}-{name}{'-' + tag if tag else ''}-n{n}",
                    name,
                    dict(params),
                    {"kv_capacity_tokens": kv_tokens},
                    {"requests": n, "arrival": {"process": "poisson", "rate": rate}},
                )
                for n in counts
            )

        # 003's premise is known output lengths: the claim rows give mcsf the oracle (labelled as
        # one); the leak-free default (a per-task Gaussian from the calibration sample) is a
        # supporting row. (Set after the first run of this table under the new rules had given
        # mcsf the gaussian default by inheritance: the table before it used the oracle, then
        # mcsf's registry default; reported as a change made after seeing a result.)
        mcsf = Measure(
            "mcsf (oracle: known lengths, 003's premise)",
            arms("mcsf", {"output_predictor": "oracle"}),
            "slope",
            "e2e_s.mean",
            counts,
        )
        mcsf_gaussian = Measure("mcsf (per-task Gaussian, no oracle)", arms("mcsf", {}), "slope", "e2e_s.mean", counts)
        claim = (
            Claim("best baseline's slope about 3x MC-SF's (003 Fig. 5 left, high demand)", -2 / 3, -2 / 3)
            if label == "high"
            else Claim("best baseline's slope >= 8x MC-SF's (003 Fig. 5 right, low demand)", None, -0.875)
        )
        setting = (
            f"{label} demand: Poisson {rate:g}/s, KV {kv_tokens:,} tokens (003: 16,492), "
            f"n = {' / '.join(map(str, counts))}"
        )
        parts = []
        supporting = []
        for baseline, params in D_BASELINES:
            shown = ", ".join(f"{key} {value:g}" for key, value in params.items())
            part = Measure(f"{baseline} ({shown})", arms(baseline, params), "slope", "e2e_s.mean", counts)
            parts.append(part)
            supporting.append(
                RowSpec(
                    f"D mcsf vs {baseline} ({shown})",
                    f"{setting}; {shown}, clear on overflow",
                    part,
                    mcsf,
                    claim,
                    note="one baseline setting (the claim row is against the best of them at each seed)",
                )
            )
        rows.append(
            RowSpec(
                "D mcsf vs the best alpha baseline (per seed)",
                f"{setting}; at each seed the lowest slope of the {len(parts)} alpha-protect / alpha-beta-clear "
                "settings below (clear on overflow)",
                best_of("best alpha baseline (per seed)", parts),
                mcsf,
                claim,
                role="claim",
            )
        )
        rows.append(
            RowSpec(
                "D mcsf (no oracle) vs the best alpha baseline (per seed)",
                f"{setting}; mcsf predicts each output length from its task's Gaussian warmed by the "
                "calibration sample (the registry default), not the true length 003 assumes",
                best_of("best alpha baseline (per seed)", parts),
                mcsf_gaussian,
                claim,
                note="the leak-free predictor: 003 assumes known lengths (the claim row)",
            )
        )
        rows.extend(supporting)
    return rows


def rows_baton(scale: dict[str, Any], filters: dict[str, Any]) -> list[RowSpec]:
    """002 Table 2: continuous insertion (FCFS on B slots) vs static batches of B on a
    run-to-completion engine (a batch takes no one new until all of it has finished). The claim
    row is B = :data:`BATON_CLAIM_B`; the other B are supporting."""
    workload = {
        "requests": scale["baton_requests"],
        "arrival": {"process": "all-at-once"},
        "ratio": {"chat": 1, "code": 0},
        "filters": filters,
    }
    rows = []
    for b in scale["baton_batches"]:
        static = Arm(
            f"baton-b{b}-static", "static", {"batch_size": b}, {"max_num_seqs": b, "run_to_completion": True}, workload
        )
        ours = Arm(f"baton-b{b}-continuous", "fcfs", {}, {"max_num_seqs": b}, workload)
        bench, baton = BATON_TABLE.get(b, (None, None))
        claim = (
            Claim(f"x{bench / baton:.2f} (002 Table 2: {bench:g} -> {baton:g} s)", bench / baton - 1, bench / baton - 1)
            if bench and baton
            else Claim("no paper number at this B")
        )
        is_claim = b == BATON_CLAIM_B
        rows.append(
            RowSpec(
                "Baton continuous vs static batches",
                f"B = {b}: {scale['baton_requests']} short chat queries at once (input "
                f"{filters.get('min_input_tokens', 4)}-{filters.get('max_input_tokens', 1024)} tokens, "
                f"prompt + reply <= {filters['max_total_tokens']}); static batches of {b} on a "
                f"run-to-completion engine vs FCFS on {b} continuous slots",
                Measure(f"static B={b}", (static,), key="request_throughput_rps"),
                Measure("continuous", (ours,), key="request_throughput_rps"),
                claim,
                role="claim" if is_claim else "supporting",
                note="" if is_claim else f"another B of Table 2 (the claim row is B = {BATON_CLAIM_B})",
            )
        )
    return rows


# -- the table -------------------------------------------------------------------------------------
COLUMNS = (
    "scenario",
    "role",
    "setting",
    "paper",
    "quantity",
    "baseline",
    "ours",
    "change",
    "diff",
    "k_of_n",
    "p",
    "verdict",
    "reason",
    "also",
)
HEADER = (
    "scenario",
    "role",
    "setting",
    "paper",
    "quantity",
    "baseline mean [95% CI]",
    "ours mean [95% CI]",
    "mean change [95% CI]",
    "paired diff [95% CI]",
    "k of n better",
    "p (claim rows: Holm-adjusted), test",
    "verdict",
    "reason",
    "also (change [95% CI])",
)

SIM_NOTES = """
How to read it: "role" says whether a row is the one row of a paper claim (claim: counted, and in
the table's Holm family) or a supporting row (shown, not counted); "baseline" and "ours" name the
sides in the scenario column; each is a mean over seeds with its 95% Student t interval; "mean
change" is mean(ours) / mean(baseline) - 1 with a 95% interval over paired seeds (Fieller's, at
every number of seeds: analytic, so a verdict never depends on a random seed); "paired diff" is the mean of ours - baseline per seed
with its 95% Student t interval; "k of n better" counts the seeds where ours was better (the
quantity's direction: lower is better for latencies and slopes); "p" is the paired test's two-sided
p (exact sign-flip below 10 seeds, paired t from 10), for claim rows with its Holm-adjusted value.
Every row's per-seed values are in reproduction_<name>.seeds.json; `python -m bench.reproduce
--render <name>` recomputes every row from them.

{verdict_rule}

Where the setting differs from the papers, and why:

- All runs use the synthetic stand-ins (lengths fitted to ShareGPT and Python-Code-23k, no real
  text) and the Qwen2.5-7B / 2 x V100 latency preset of 004 Table 2 (paper coefficients, not
  validated here: no fidelity report compares this preset with a real engine), not the papers'
  models, datasets and hardware: each paper measured its own engine, we measure one simulated
  engine. The papers report best cases or single runs; a row here is a mean over seeds.
- What the schedulers know: output lengths from a calibration sample of the same datasets that
  the run does not send (never this run's own lengths) unless a row names an oracle; latencies
  from eq. 14/15 fitted to a noisy simulated profile of the engine (runners/engines/planning_model.py),
  never the engine's own model unless a row says so.
- A (004): slo-sa runs on a continuous-batching engine whose max_num_seqs is the plan's max
  batch. With dispatch 'slots' (registry default) it sends in plan order as slots free up and
  re-plans on every completion; with the paper's protocol it sends every request at once, each
  with its batch's planned start as priority, to an engine serving by priority. Output lengths
  come from a per-task Gaussian warmed from a calibration sample of the same datasets drawn
  with other seeds (004 section 4.2; never this run's own lengths), or the true length (oracle)
  or the true length with relative Gaussian noise (noisy oracle, Fig. 9), both oracles. Fig.
  10's row plans with the engine's own latency model (an oracle) with and without a seeded 10%
  error on each coefficient, and is judged against the paper's bound (G falls by at most 1.9%).
- B (000): the claim row compares dynamic-mem with FCFS on the same slots (max_num_seqs) and KV,
  where memory binds (KV {b_kv_tight:,} tokens): the strongest simple baseline with the same
  resources. The paper's own comparison, FCFS with a fixed max_num_seqs of {b_static} (vLLM's
  default 256 is the paper's "static batch size as configured by vLLM") against dynamic-mem on
  {b_slots} slots, is a supporting row: its gain comes from the extra slots, not the algorithm
  (the matched row at KV {b_kv:,} tokens, where memory does not bind, shows how much). Capacity
  needs TTFT <= 10 s as well as TPOT <= 50 ms, so a scheduler cannot meet the decode SLA by
  holding requests in its queue (latency counts from arrival); the paper states only the decode
  SLA.
- C (001): SLS = static batches of 16 (the paper's HF setting); ILS = FCFS with at most 16 in
  flight per instance (a conservative cap, as DeepSpeed-FastGen's); uncapped FCFS is vLLM-style
  continuous batching, which the paper did not compare: the matched strongest simple baseline
  with the same resources (supporting rows, no paper number). Our engines cannot continue a slice in
  place: each further slice of a request re-sends its prompt plus the output so far, which is
  prefilled again less the blocks the engine's prefix cache still holds (prefix caching is on by
  default, as vLLM's).
- D (003): the paper simulates Llama2-70B on 2 A100s (KV 16,492 tokens) with 10,000 prompts;
  we use the 7B preset's latencies with KV {d_kv:,} tokens (rounded down to whole 16-token
  blocks) and n = {d_counts}. The paper's alpha / beta values were lost from our copy of its text:
  alpha-protect runs at alpha 0.1 / 0.2 / 0.25 / 0.3 (around the smallest alpha that avoids the
  loop, the paper's 0.1 grid step) and alpha-beta-clear at alpha 0.1 / 0.2 x beta 0.1 / 0.2; both
  clear on overflow, as the paper. Its claim is against the best baseline: the claim row's
  baseline is, at each seed, the lowest slope of the eight settings; the per-setting rows are
  supporting. A baseline run that livelocks (the clear-all loop the paper describes for small
  alpha) has no value at that seed and is left out of that seed's best; the rows say at how many
  seeds it livelocked. 003 assumes known output lengths, so the claim rows give mcsf the oracle
  (labelled); "mcsf (no oracle)" is the leak-free default, a supporting row. Set after this
  table's first run under the new rules, in which mcsf had inherited the new leak-free default
  (the previous table used the oracle, then mcsf's default): a change made after seeing a result.
- Baton (002): the paper's benchmark is HuggingFace batch-wise inference, which keeps computing
  finished queries until the batch ends (idle computation); our run-to-completion engine holds
  their KV but charges no compute for them, so static batches lose less here. The claim row is
  B = 6, the middle of the paper's five B; the others are supporting.
- No scheduler parameter was tuned to this table.

Scheduler parameters in effect: the registry defaults below, plus what a row's setting states.
{parameters}
"""


#: The real table's scale: what fits on 2 CPU cores (the simulator's in brackets in the notes); the
#: settings both tables share (the papers' own: batches, counts, noise, rates, B) are read from
#: SIM_SCALE, and QUICK_REAL_SCALE's from QUICK_SCALE.
REAL_SCALE: dict[str, Any] = {
    "filters": {"max_total_tokens": 256},  # [2048, vLLM's ShareGPT default]: shorter pairs only
    "seeds": 3,
    "server_max_seqs": 64,  # [the preset's 256]
    "small_kv_blocks": 24,  # x 128-token blocks = 3,072 tokens, for B (memory) and D
    "a_counts": SIM_SCALE["a_counts"],
    "a_batches": SIM_SCALE["a_batches"],
    "a_oracle": SIM_SCALE["a_oracle"],
    "a_noise": SIM_SCALE["a_noise"],
    "b_requests": 64,
    "b_slots": 64,
    "b_static": (16,),  # [1,000; 1,024 slots; static 256]; memory binds on the small-KV servers
    # [0.5 to 8 req/s, TPOT <= 50 ms, TTFT <= 10 s, 400 requests]. The table's first pilot run (4 to
    # 12 req/s, 40 requests, the paper's 50 ms) could not differ: both sides met the target at every
    # rate. Changed on 2026-11-27, after seeing that, to bounds scaled to this engine: TPOT and
    # D_SLA = its decode step at a batch of 32 (vllm_cpu_common.tiny_sla_target_s), TTFT = that
    # times the simulator's TTFT / TPOT ratio (10 s / 50 ms = 200); rates up to past its capacity
    "b_rates": tuple(float(x) for x in range(5, 65, 5)),
    "b_sla_requests": 100,
    "b_tpot_s": None,  # resolved by real_scale(): tiny_sla_target_s()
    "b_ttft_s": None,  # resolved by real_scale(): b_tpot_s * TTFT_PER_TPOT
    "c_requests": 64,
    "c_rate": SIM_SCALE["c_rate"],
    "c_instances": SIM_SCALE["c_instances"],
    "c_cap": SIM_SCALE["c_cap"],
    "d_counts": (15, 30, 60),
    "d_rates": SIM_SCALE["d_rates"],
    "baton_requests": SIM_SCALE["baton_requests"],
    "baton_batches": SIM_SCALE["baton_batches"],
}
#: The simulator's TTFT bound over its TPOT bound in 000 Table II's row (10 s / 50 ms): the real
#: table keeps the ratio with its scaled TPOT bound.
TTFT_PER_TPOT = SIM_SCALE["b_ttft_s"] / SIM_SCALE["b_tpot_s"]


def real_scale(scale: dict[str, Any]) -> dict[str, Any]:
    """``scale`` with the tiny engine's SLA bounds filled in where they are None (read from the
    bundled profile: REAL_SCALE's notes), seconds."""
    tpot = scale["b_tpot_s"] if scale.get("b_tpot_s") is not None else tiny_sla_target_s()
    ttft = scale["b_ttft_s"] if scale.get("b_ttft_s") is not None else round(tpot * TTFT_PER_TPOT, 4)
    return {**scale, "b_tpot_s": tpot, "b_ttft_s": ttft}


QUICK_REAL_SCALE: dict[str, Any] = {
    **REAL_SCALE,
    "seeds": 2,
    "a_counts": QUICK_SCALE["a_counts"],
    "a_batches": QUICK_SCALE["a_batches"],
    "a_oracle": QUICK_SCALE["a_oracle"],
    "a_noise": QUICK_SCALE["a_noise"],
    "b_requests": 16,
    "b_rates": (4.0,),
    "b_sla_requests": 8,
    "c_requests": 8,
    "d_counts": (4, 8),
    "d_rates": QUICK_SCALE["d_rates"],
    "baton_requests": 8,
    "baton_batches": (2,),
}

REAL_NOTES = """
How to read it: as the simulator table (reproduction_simulator.md): role (claim or supporting),
means over seeds with 95% intervals, mean change with its interval (Fieller's below 10 seeds),
paired difference, k of n seeds better, the paired test's p (Holm-adjusted for claim rows). With
fewer than {pilot_seeds} seeds this table is a pilot: no row counts as reproduced.

{verdict_rule}

How this differs from the simulator table (same rows, scaled down to fit this 2-core machine):

- Engine: vLLM (CPU build) serving a random tiny Llama (2 layers, hidden 256) on 2 CPU cores;
  slo-sa, scls and mcsf plan with its fitted latency profile
  (bench/results/tiny-cpu-vllm.profile.yaml). The CPU is shared by the engine and our client
  (which runs the policies); launching took {launch}.
- Workload: the same synthetic stand-ins, tokenised with the tiny model's tokenizer, keeping
  only pairs of at most {max_total} tokens (prompt + reply) instead of 2,048.
- Servers: each group of rows attaches to servers launched once (max_num_seqs {max_seqs},
  128-token KV blocks), one run at a time: A, B (SLA), B (memory) where memory does not bind
  (the matched and the paper's static rows) and Baton on one instance with 1 GiB of KV; B
  (memory) where it binds (the claim row: dynamic-mem against FCFS with the same 64 slots) and D
  on one instance with the KV forced to {kv_blocks} blocks ({kv_tokens:,} tokens); C on two
  instances. A smaller max batch (A: 1/2/4; B: static {b_static}; Baton: B) is a cap on
  requests in flight held by the client (FCFS with max_in_flight; slo-sa keeps at most max_batch
  in flight itself; static sends its batches of B) rather than vLLM's max_num_seqs. vLLM has no
  run-to-completion mode: the Baton baseline is the static scheduler alone (it sends a batch
  only when the previous one has finished; finished requests free their KV at once). The paper's
  protocol rows of A (a priority server) and A's Fig. 10 row (a planning error injected into the
  simulator's own latency model) are left out. The first run on each server sends the
  warm-up waves; the rest find it warm.
- Scaled: {seeds} seeds; B (memory) {b_requests} requests at once, dynamic-mem b_max
  {b_slots} (the servers' max_num_seqs); B (SLA) rates {b_rates} req/s with {b_sla} requests each,
  so the 90% rule is judged on {b_sla} requests; its bounds are scaled to this engine: TPOT and
  D_SLA {b_tpot_ms:g} ms (the profile's decode step at a batch of 32; the paper's 50 ms is a GPU
  model's step), TTFT {b_ttft_s:g} s (the simulator's 10 s / 50 ms ratio). A change made after
  seeing a result: this table's first pilot run kept the paper's 50 ms and 10 s at 4 to 12 req/s
  with 40 requests, and both sides met the target at every rate (nothing could differ); C {c_requests}
  requests at {c_rate:g}/s; D n = {d_counts} at the same rates as the simulator.{reruns}
- Load: the 1-minute load average of this 2-core machine, read after each run, was {load_min:.1f}
  to {load_max:.1f} (median {load_median:.1f}); it counts the server's own processes and our
  client. Timings carry that noise; the paired intervals include it.
- No scheduler parameter was tuned to this table: registry defaults, as in the simulator table.
- E rows (in-engine schedulers, issue 14) come from `python -m bench.in_engine` ({in_engine}): an
  in-engine scheduler is the server's --scheduler-cls, so every E run launches its own server
  (80 or 40 requests at once of at most 640 tokens, or Poisson arrivals for E3), the arms taking turns at
  each seed; see bench/results/in_engine.md for their settings and parameters. They are
  supporting rows: each paper claim's row is its A-D or Baton row.

Scheduler parameters in effect: the registry defaults below, plus what a row's setting states.
{parameters}
"""


def row_record_of(row: dict[str, Any]) -> dict[str, Any] | None:
    """A table row's record (its identity and per-seed values): the ``record`` field, a mapping
    or its JSON text (as read back from the CSV); None when the row has none."""
    record = row.get("record")
    if isinstance(record, str) and record.strip():
        record = json.loads(record)
    return dict(record) if isinstance(record, dict) else None


def write(
    rows: list[dict],
    engine: str,
    command: str,
    seconds: float,
    notes: str,
    problems: list[str] | None = None,
    made_on: str | None = None,
    pilot: bool | None = None,
) -> None:
    """reproduction_<engine>.csv (every field), .seeds.json (every row's record: identity and
    per-seed values) and .md (the Holm statement, the table, problems, the tally of the claim
    rows, and notes). Every row is recomputed from its record (:func:`judge_records`: statistics,
    Holm's correction over the table's claim rows, verdicts), so rows from different runs (the
    real table's server groups, bench/in_engine.py's E rows) are judged as one table. ``pilot``:
    a real-engine table with fewer than 10 seeds (None: the flag of the table's previous
    .seeds.json, else False); ``made_on``: the date the table's runs were made (default today).
    Rows without a record (a CSV made before records were kept) are written as they were
    computed, with a line saying so."""
    OUT.mkdir(parents=True, exist_ok=True)
    seeds_path = OUT / f"reproduction_{engine}.seeds.json"
    if pilot is None:
        pilot = bool(json.loads(seeds_path.read_text()).get("pilot")) if seeds_path.exists() else False
    records = [row_record_of(row) for row in rows]
    if all(record is not None for record in records):
        kept = [record for record in records if record is not None]
        rows = judge_records(kept, pilot)
        seeds_path.write_text(seeds_file_text(kept, engine, pilot))
        header = holm_text(rows)
        tally = "Verdicts (claim rows only): " + tally_text(rows, pilot)
    else:
        missing = sum(1 for record in records if record is None)
        header = (
            f"{missing} row(s) carry no per-seed values (made before they were kept): the rows are shown as they "
            "were computed, without Holm's correction. Regenerate the table."
        )
        tally = "Verdicts: " + ", ".join(
            f"{sum(1 for row in rows if row.get('verdict') == name)} {name}"
            for name in dict.fromkeys(str(row.get("verdict")) for row in rows)
        )
    with (OUT / f"reproduction_{engine}.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(dict.fromkeys(key for row in rows for key in row)))
        writer.writeheader()
        for row in rows:
            record = row.get("record")
            writer.writerow(
                {**row, "record": json.dumps(record, separators=(",", ":")) if isinstance(record, dict) else record}
            )
    cell = lambda text: str(text).replace("|", "/").replace("\n", " ")  # noqa: E731
    lines = [
        f"# Reproduction on {engine}",
        "",
        f"Made by `{command}` on {made_on or time.strftime('%Y-%m-%d')} ({seconds:.0f} s).",
        "",
        header,
    ]
    if pilot:
        lines += [
            "",
            f"A pilot table: fewer than {PILOT_BELOW_SEEDS} seeds on a real engine, so no row counts as reproduced.",
        ]
    lines += [
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "---|" * len(HEADER),
    ]
    lines += [
        "| "
        + " | ".join(cell(scenario_cell(row) if column == "scenario" else row.get(column, "")) for column in COLUMNS)
        + " |"
        for row in rows
    ]
    if problems is not None:
        lines += [
            "",
            "Requests that failed or were sent twice: " + ("none." if not problems else ""),
            *[f"- {problem}" for problem in problems],
        ]
    lines += ["", tally]
    (OUT / f"reproduction_{engine}.md").write_text("\n".join(lines) + "\n" + notes)
    print("\n".join(lines))


def scenario_cell(row: dict[str, Any]) -> str:
    """The scenario as the .md table shows it: a side that runs an oracle (its label says so) is
    named in the row itself when the scenario's words do not say it, so no rendered row hides an
    oracle in the CSV's label columns (issue 43 item 8)."""
    scenario = str(row.get("scenario", ""))
    named = [
        f"{side}: {label}"
        for side, label in (("ours", row.get("ours_label")), ("baseline", row.get("baseline_label")))
        if isinstance(label, str) and "oracle" in label.lower() and "no oracle" not in label.lower()
    ]
    if not named or "oracle" in scenario.lower():
        return scenario
    return f"{scenario} ({'; '.join(named)})"


def sim_config(arm: Arm) -> dict[str, Any]:
    """The run config of ``arm`` on the simulator."""
    config: dict[str, Any] = {
        "engine": {"kind": "sim", **arm.engine},
        "workload": dict(arm.workload),
        "scheduler": {"name": arm.scheduler, "params": dict(arm.params)},
    }
    if arm.slo:
        config["slo"] = dict(arm.slo)
    return config


#: The multi-turn table's sessions (issue 31): at most 8 turns each, think time exponential with
#: mean 5 s (runners.workload.sessions' defaults), chat from the multi-turn stand-in (ShareGPT's 3.51
#: exchanges a conversation), code single-turn; the simulator's prefix cache on (vLLM's default).
SESSIONS = {"max_turns": 8}


def rows_sessions(scale: dict[str, Any]) -> list[RowSpec]:
    """Do 004's and 000's verdicts hold when the traffic is multi-turn conversations? The claim rows
    of A and B with whole sessions instead of single requests, everything else as there (fixed
    before any result was read): A's claim cell (:data:`A_CLAIM_SETTING`: that many sessions at
    once, max batch = engine max_num_seqs, slo-sa at registry defaults, the paper's SLOs per
    turn), and B's tight-memory matched row (half as many sessions as B's requests, about as many
    turns, all at once; dynamic-mem and FCFS with the same slots and KV). Supporting rows: A with
    four times the sessions (a longer burst), and A's and B's single-turn claim rows run again in
    this table, so each sessions row is set against its single-turn row on the same engine (the
    main table predates the simulator's prefix cache)."""
    n, b = A_CLAIM_SETTING

    def sessions(count: int) -> dict[str, Any]:
        return {"requests": count, "arrival": {"process": "all-at-once"}, "multi_turn": dict(SESSIONS)}

    def a_arms(count: int) -> tuple[Arm, Arm]:
        return (
            Arm(f"s-a-n{count}-b{b}-fcfs", "fcfs", {}, {"max_num_seqs": b}, sessions(count)),
            Arm(f"s-a-n{count}-b{b}-slo-sa", "slo-sa", {"max_batch": b}, {"max_num_seqs": b}, sessions(count)),
        )

    rows = []
    single = {"requests": n, "arrival": {"process": "all-at-once"}}
    rows.append(
        g_row(
            "A (single-turn, this engine) slo-sa vs fcfs",
            f"A's claim cell as in the main table ({n} requests at once, max batch {b}), run here on the same "
            "engine as the sessions (prefix caching on)",
            Arm(f"s-a1-n{n}-b{b}-fcfs", "fcfs", {}, {"max_num_seqs": b}, single),
            Arm(f"s-a1-n{n}-b{b}-slo-sa", "slo-sa", {"max_batch": b}, {"max_num_seqs": b}, single),
            A_CLAIM,
            "slo-sa",
            note="the single-turn row to set the sessions' row against, same engine and seeds",
        )
    )
    for count, role in ((n, "claim"), (4 * n, "supporting")):
        fcfs, slo_sa = a_arms(count)
        rows.append(
            g_row(
                "A (multi-turn) slo-sa vs fcfs",
                f"{count} sessions at once (at most {SESSIONS['max_turns']} turns, think time exponential mean 5 s; "
                f"each turn judged on its task's SLO), max batch {b} (engine max_num_seqs {b}); slo-sa registry "
                "defaults; prefix caching on",
                fcfs,
                slo_sa,
                A_CLAIM,
                "slo-sa",
                role,  # type: ignore[arg-type]
                "A's claim cell with sessions" if role == "claim" else "a longer burst of sessions",
            )
        )
    slots, kv = scale["b_slots"], scale["b_kv_tight"]
    rows += [
        dataclasses.replace(
            row,
            scenario="B (single-turn, this engine) dynamic-mem vs fcfs, same slots and KV",
            role="supporting",
            note="B's claim row as in the main table, run here on the same engine as the sessions",
        )
        for row in rows_b_memory(scale, kv, tight=True)
    ]
    work = sessions(scale["b_requests"] // 2)
    dynamic = Arm(
        "s-b-dynamic", "dynamic-mem", {"b_max": slots}, {"kv_capacity_tokens": kv, "max_num_seqs": slots}, work
    )
    matched = Arm("s-b-fcfs", "fcfs", {}, {"kv_capacity_tokens": kv, "max_num_seqs": slots}, work)
    rows.append(
        RowSpec(
            "B (multi-turn) dynamic-mem vs fcfs, same slots and KV",
            f"{work['requests']} sessions at once (at most {SESSIONS['max_turns']} turns, think time exponential "
            f"mean 5 s), KV {kv:,} tokens (memory binds); FCFS with max_num_seqs {slots} and dynamic-mem with b_max "
            f"{slots} on max_num_seqs {slots}; prefix caching on",
            Measure(f"fcfs {slots} slots", (matched,), key="output_throughput_tps"),
            Measure("dynamic-mem", (dynamic,), key="output_throughput_tps"),
            Claim(
                "output throughput +6.5% to +28.2% (000 Table I; abstract: 8% to 28%) over the static batch size "
                "vLLM is configured with",
                0.065,
                0.282,
            ),
            also=("preemptions", "e2e_s.mean"),
            role="claim",
            note="B's tight-memory matched row with sessions",
        )
    )
    return rows


def sim_rows(scale: dict[str, Any]) -> list[RowSpec]:
    return (
        rows_a(scale)
        + rows_b_memory(scale, scale["b_kv_tight"], tight=True)
        + rows_b_memory(scale, scale["b_kv"], tight=False)
        + rows_b_sla(scale)
        + rows_c(scale)
        + rows_d(scale, scale["d_kv"])
        + rows_baton(scale, scale["baton_filters"])
    )


def simulate(args: argparse.Namespace) -> None:
    scale = QUICK_SCALE if args.quick else {**SIM_SCALE, "seeds": args.seeds or SIM_SCALE["seeds"]}
    first = args.first_seed or 0
    seeds = list(range(first, first + scale["seeds"]))
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(args.keep) if args.keep else Path(scratch)
        specs = rows_sessions(scale) if args.sessions else sim_rows(scale)
        rows, results = run_rows(specs, seeds, sim_config, root, args.workers)
    seconds = time.perf_counter() - started
    name = "simulator-quick" if args.quick else "simulator"
    command = "python -m bench.reproduce" + (" --quick" if args.quick else f" --seeds {scale['seeds']}")
    if args.sessions:
        name += "-sessions"
        command += " --sessions"
    if first:  # a check on other seeds: its own table beside the main one
        name += f"-seeds{seeds[0]}-{seeds[-1]}"
        command += f" --first-seed {first}"
    meta: dict[str, Any] = {
        "engine": "sim",
        "command": command,
        "seeds": seeds,
        "seconds": round(seconds, 1),
        "made_on": time.strftime("%Y-%m-%d"),  # a later --render keeps the date the runs were made
        "runs": len(results.outcomes),
        "pilot": False,
        "scale": scale,
        "parameters": parameters_text(specs),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"reproduction_{name}.json").write_text(json.dumps(meta, indent=2) + "\n")
    write(rows, name, meta["command"], seconds, sim_notes(meta), pilot=False)
    print(json.dumps({"runs": len(results.outcomes), "seconds": round(seconds, 1)}))


def sim_notes(meta: dict) -> str:
    """The simulator table's notes from its meta (the .json beside it)."""
    scale = meta["scale"]
    return SIM_NOTES.format(
        verdict_rule=VERDICT_RULE,
        d_counts=" / ".join(map(str, scale["d_counts"])),
        d_kv=scale["d_kv"],
        b_kv=scale["b_kv"],
        b_kv_tight=scale["b_kv_tight"],
        b_slots=scale["b_slots"],
        b_static=" / ".join(map(str, scale["b_static"])),
        parameters=meta.get("parameters", "(not recorded)"),
    )


# -- the real engine -------------------------------------------------------------------------------
class RealTarget:
    """Turns arms into run configs attached to servers launched once for a group of rows. An
    arm's engine settings must be what those servers were launched with, except a max_num_seqs
    below theirs: FCFS gets it as a cap on requests in flight (the same limit, held in our queue
    instead of vLLM's), slo-sa holds it itself (max_batch) and static sends batches of at most
    that size; run_to_completion only with the static scheduler (which already waits for its
    whole batch)."""

    def __init__(self, urls: list[str], server_max_seqs: int, kv_tokens: int | None, workload_extra: dict) -> None:
        self.urls = urls
        self.server_max_seqs = server_max_seqs
        self.kv_tokens = kv_tokens
        self.workload_extra = workload_extra

    def __call__(self, arm: Arm) -> dict[str, Any]:
        engine = dict(arm.engine)
        cap = engine.pop("max_num_seqs", None)
        if engine.pop("kv_capacity_tokens", self.kv_tokens) != self.kv_tokens:
            raise ValueError(f"{arm.name}: a KV capacity these servers were not launched with")
        if engine.pop("instances", len(self.urls)) != len(self.urls):
            raise ValueError(f"{arm.name}: an instance count these servers were not launched with")
        if engine.pop("run_to_completion", False) and arm.scheduler != "static":
            raise ValueError(f"{arm.name}: vLLM has no run-to-completion mode")
        if engine.pop("scheduling_policy", "fcfs") != "fcfs":
            raise ValueError(f"{arm.name}: these servers serve FCFS, not by priority")
        if engine:
            raise ValueError(f"{arm.name}: no real equivalent for engine settings {engine}")
        params = dict(arm.params)
        if cap is not None and cap > self.server_max_seqs:
            raise ValueError(f"{arm.name}: max_num_seqs {cap} above the servers' {self.server_max_seqs}")
        if cap is not None and cap < self.server_max_seqs:
            if arm.scheduler == "fcfs":
                params["max_in_flight"] = cap
            elif arm.scheduler == "static" and params.get("batch_size", 8) <= cap:
                pass
            elif params.get("max_batch") != cap:
                raise ValueError(f"{arm.name}: {arm.scheduler} has no cap of {cap} requests in flight")
        config: dict[str, Any] = {
            "engine": {"kind": "openai", "urls": ",".join(self.urls), "profile": str(PROFILE)},
            "workload": {**self.workload_extra, **arm.workload},
            "max_duration_s": 900,
            "scheduler": {"name": arm.scheduler, "params": params},
        }
        if arm.slo:
            config["slo"] = dict(arm.slo)
        return config


@contextmanager
def launched(model: Path, log_folder: Path, **settings):
    """vLLM servers on the tiny model, up for the body of the ``with``; yields the RealEngine and
    prints how long the launch took."""
    started = time.perf_counter()
    with launched_vllm(model, log_folder, **settings) as engine:
        print(
            f"launched {settings} in {time.perf_counter() - started:.0f} s: "
            f"{[i.endpoint.base_url for i in engine.instances]}, KV {engine.instances[0].kv_capacity_tokens} tokens",
            flush=True,
        )
        yield engine


def real(args: argparse.Namespace) -> None:
    if not PROFILE.exists():
        raise SystemExit(f"{PROFILE} is missing: run python -m bench.profile_validation first")
    scale = real_scale(QUICK_REAL_SCALE if args.quick else {**REAL_SCALE, "seeds": args.seeds or REAL_SCALE["seeds"]})
    chosen = tuple(args.rows or ())  # scenario prefixes: only those rows run, the others are kept
    seeds = list(range(scale["seeds"]))
    started = time.perf_counter()
    rows: dict[str, list[dict]] = {}
    used: list[RowSpec] = []
    problems: list[str] = []
    launches: list[float] = []
    load: list[float] = []
    runs = 0
    kv_tokens = None

    def on_finish(member: StudyMember, outcome: Outcome) -> None:
        load.append(os.getloadavg()[0])
        status, summary, error = outcome
        failed = (summary.failed if summary is not None else None) or 0
        resent = (summary.resent_requests if summary is not None else None) or 0
        if status == "done" and (failed or resent):
            problems.append(f"{member.run_id}: {failed} failed, {resent} sent twice")
        print(f"  [{member.run_id}: {status}, load {load[-1]:.2f}]", flush=True)

    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(args.keep) if args.keep else Path(scratch_dir)
        model = tiny_model(Path(args.model) if args.model else scratch / "tiny")
        max_seqs = scale["server_max_seqs"]
        workload_extra = {"tokenizer": str(model), "filters": scale["filters"]}

        def pick(specs: list[RowSpec]) -> list[RowSpec]:
            return [spec for spec in specs if not chosen or spec.scenario.startswith(chosen)]

        def group(engine, specs: list[RowSpec], kv=None) -> list[dict]:
            nonlocal runs
            launches.append(time.perf_counter() - launch_started)
            target = RealTarget([i.endpoint.base_url for i in engine.instances], max_seqs, kv, workload_extra)
            used.extend(specs)
            table, results = run_rows(
                specs, seeds, target, scratch / "results", prepare=without_warmup, on_finish=on_finish
            )
            runs += len(results.outcomes)
            return table

        one = pick(
            rows_a(scale, protocol=False, planning=False)
            + rows_b_memory(scale, None, tight=False)  # memory does not bind on these servers
            + rows_b_sla(scale)
            + rows_baton(scale, scale["filters"])
        )
        rows["one"] = rows["small"] = rows["two"] = []
        launch_started = time.perf_counter()
        if one:
            with launched(model, scratch / "servers-one", max_num_seqs=max_seqs) as engine:
                rows["one"] = group(engine, one)
        small_kv = pick(rows_b_memory(scale, 0, tight=True) + rows_d(scale, 0))
        launch_started = time.perf_counter()
        if small_kv:
            with launched(
                model,
                scratch / "servers-small-kv",
                max_num_seqs=max_seqs,
                max_model_len=1024,
                num_gpu_blocks_override=scale["small_kv_blocks"],
            ) as engine:
                kv_tokens = engine.instances[0].kv_capacity_tokens  # B (memory, the claim row: it binds) and D
                rows["small"] = group(
                    engine, pick(rows_b_memory(scale, kv_tokens, tight=True) + rows_d(scale, kv_tokens)), kv_tokens
                )
        two = pick(rows_c(scale))
        launch_started = time.perf_counter()
        if two:
            with launched(model, scratch / "servers-two", max_num_seqs=max_seqs, instances=2) as engine:
                rows["two"] = group(engine, two)
    seconds = time.perf_counter() - started
    name = "cpu-vllm-quick" if args.quick else "cpu-vllm"
    pilot = scale["seeds"] < PILOT_BELOW_SEEDS
    meta = {
        "engine": "cpu-vllm",
        "pilot": pilot,
        "command": "python -m bench.reproduce --real" + (" --quick" if args.quick else f" --seeds {scale['seeds']}"),
        "seconds": round(seconds, 1),
        "made_on": time.strftime("%Y-%m-%d"),  # a later --render keeps the date the runs were made
        "runs": runs,
        "launch_s": [round(x, 1) for x in launches],
        "kv_tokens": kv_tokens,
        "problems": problems,
        "scale": scale,
        "load": [round(x, 2) for x in load],
        "parameters": parameters_text(used),
    }
    table = in_table_order(rows["one"] + rows["small"] + rows["two"])
    if chosen:  # a partial run: the other rows as they were measured, the run recorded beside them
        meta, table = merged_rerun(name, meta, table, chosen)
        problems = meta["problems"]
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"reproduction_{name}.json").write_text(json.dumps(meta, indent=2) + "\n")
    write(
        table, name, meta["command"], meta["seconds"], real_notes(meta), problems, pilot=pilot, made_on=meta["made_on"]
    )
    print(json.dumps({key: meta[key] for key in ("runs", "seconds", "launch_s", "problems")}))


def in_table_order(rows: list[dict]) -> list[dict]:
    """The rows in the simulator table's order (A, B, C, D, E, Baton), keeping the order within each."""
    rank = lambda row: 5 if row["scenario"].startswith("Baton") else "ABCDE".index(row["scenario"][0])  # noqa: E731
    return sorted(rows, key=rank)


def merged_rerun(
    name: str, meta: dict[str, Any], table: list[dict], chosen: tuple[str, ...]
) -> tuple[dict[str, Any], list[dict]]:
    """A partial real run (``--rows``) folded into reproduction_<name>: the rows whose scenario
    starts with one of ``chosen`` replaced by ``table``'s, the others kept as they were measured;
    the table's record keeps its first command, date and figures and lists the rerun (its rows,
    command, date, seconds, runs, problems) under ``reruns``."""
    previous = json.loads((OUT / f"reproduction_{name}.json").read_text())
    rerun = {key: meta[key] for key in ("command", "made_on", "seconds", "runs", "problems", "launch_s", "load")}
    merged = {
        **previous,
        "scale": meta["scale"],
        "problems": previous.get("problems", []) + meta["problems"],
        "load": previous.get("load", []) + meta["load"],
        "reruns": previous.get("reruns", []) + [{**rerun, "rows": list(chosen)}],
    }
    return merged, replace_rows(name, table, chosen)


def replace_rows(name: str, rows: list[dict], prefixes: tuple[str, ...]) -> list[dict]:
    """reproduction_<name>.csv's rows with those whose scenario starts with one of ``prefixes``
    replaced by ``rows`` (given the CSV's fields), in the table's order."""
    kept = [
        row
        for row in csv.DictReader((OUT / f"reproduction_{name}.csv").open())
        if not row["scenario"].startswith(prefixes)
    ]
    fields = list(kept[0]) if kept else list(rows[0])
    return in_table_order(kept + [{field: row.get(field, "") for field in fields} for row in rows])


def real_notes(meta: dict) -> str:
    scale = meta["scale"]
    load = meta["load"] or [0.0]
    return REAL_NOTES.format(
        verdict_rule=VERDICT_RULE,
        pilot_seeds=PILOT_BELOW_SEEDS,
        launch=" / ".join(f"{value:.0f}" for value in meta["launch_s"]) + " s for the three server groups",
        max_total=scale["filters"]["max_total_tokens"],
        max_seqs=scale["server_max_seqs"],
        kv_blocks=scale["small_kv_blocks"],
        kv_tokens=meta["kv_tokens"] or 0,
        seeds=scale["seeds"],
        b_static=" / ".join(map(str, scale["b_static"])),
        b_requests=scale["b_requests"],
        b_slots=scale["b_slots"],
        b_rates=" / ".join(f"{rate:g}" for rate in scale["b_rates"]),
        b_sla=scale["b_sla_requests"],
        b_tpot_ms=round(scale["b_tpot_s"] * 1000, 3) if scale.get("b_tpot_s") else 50,
        b_ttft_s=scale["b_ttft_s"],
        reruns="".join(
            f"\n- Rerun: rows {', '.join(rerun['rows'])} by `{rerun['command']} --rows ...` on {rerun['made_on']} "
            f"({rerun['seconds']:.0f} s, {rerun['runs']} runs); the other rows are the first run's."
            for rerun in meta.get("reruns", [])
        ),
        c_requests=scale["c_requests"],
        c_rate=scale["c_rate"],
        d_counts=" / ".join(map(str, scale["d_counts"])),
        load_min=min(load),
        load_max=max(load),
        load_median=float(np.median(load)),
        in_engine=(f"{meta['in_engine']['date']}" if meta.get("in_engine") else "not yet run"),
        parameters=meta.get("parameters", "(not recorded)"),
    )


def render(name: str) -> None:
    """Recompute every row of reproduction_<name> from its .seeds.json alone (statistics, Holm,
    verdicts) and rewrite its .md, .csv and .seeds.json; the notes come from its .json (how the
    table was made) where there is one."""
    seeds_path = OUT / f"reproduction_{name}.seeds.json"
    if not seeds_path.exists():
        raise SystemExit(f"{seeds_path} is missing: this table was made before per-seed values were kept")
    table = json.loads(seeds_path.read_text())
    meta_path = OUT / f"reproduction_{name}.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    if not meta:
        notes = "\n" + VERDICT_RULE + "\n"
    elif meta.get("engine") == "sim" or name.startswith("simulator"):
        notes = sim_notes(meta)
    else:
        notes = real_notes(meta)
    write(
        [{"record": record} for record in table["rows"]],
        name,
        meta.get("command", "(not recorded)"),
        float(meta.get("seconds", 0.0)),
        notes,
        meta.get("problems"),
        made_on=meta.get("made_on"),
        pilot=bool(table.get("pilot")),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=None, help="seeds per row (simulator 10, --real 3)")
    parser.add_argument("--quick", action="store_true", help="a few small rows at 3 seeds (a smoke test)")
    parser.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="simulator: seeds from this one on (default 0); other than 0 the table is written as "
        "reproduction_simulator-seeds<first>-<last> (a check on seeds the main table never used)",
    )
    parser.add_argument("--workers", type=int, default=None, help="simulator runs at once (default: all cores)")
    parser.add_argument(
        "--sessions",
        action="store_true",
        help="simulator: the multi-turn table only (A's and B's claim rows with sessions: rows_sessions), written as "
        "reproduction_simulator-sessions",
    )
    parser.add_argument("--real", action="store_true", help="on the CPU vLLM instead of the simulator")
    parser.add_argument("--model", help="--real: the tiny model's folder (built there if missing)")
    parser.add_argument("--keep", help="keep the runs (and --real: server logs) in this folder")
    parser.add_argument(
        "--rows",
        action="append",
        metavar="PREFIX",
        help="--real: run only the rows whose scenario starts with PREFIX (repeatable); the table's other rows "
        "are kept as measured and the rerun is recorded in its notes",
    )
    parser.add_argument(
        "--render",
        metavar="NAME",
        help="recompute every row of results/reproduction/reproduction_NAME (simulator, cpu-vllm) from its "
        ".seeds.json and rewrite its .md and .csv with the current rule and notes, without running anything",
    )
    args = parser.parse_args()
    if args.render:
        render(args.render)
    elif args.real:
        real(args)
    else:
        simulate(args)


if __name__ == "__main__":
    main()
