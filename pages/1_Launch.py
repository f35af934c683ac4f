"""Launch page: configure engine, workload, SLOs, schedulers and seeds; start a background job; watch it live.

Thin: fields become a job (a study of every scheduler at every seed) through runners.app.launch_form,
jobs run in a worker process (runners.app.jobs, runners.app.worker -> runners.study.runner), the offered load is
estimated by runners.run.capacity_estimate, and the live view reads the run folder and the study's
study.json (runners.views.live, runners.views.charts).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from pages.parts.app_navigation import use_app_navigation
from pages.parts.job_panel import JOB_SELECT, jobs_panel
from runners.app.jobs import start_job
from runners.app.launch_form import (
    DEFAULT_SCHEDULERS,
    FORM_DEFAULTS,
    SESSION_FIELDS,
    TRAFFIC_SHAPES,
    build_job,
    engine_field_defaults,
    field_text,
    for_engine,
    for_traffic,
    group_label,
    parameter_label,
    preview_load,
    rate_label,
    requests_field,
    save_upload,
    session_field,
    single_runs_warning,
    study_size,
    unavailable_note,
)
from runners.engines.adapters import ADAPTERS, FormField
from runners.engines.profile import PRESETS
from runners.errors import SchedlabError
from runners.metrics.catalog import metric
from runners.registry import ENGINES, SCHEDULER_PROBLEMS, SCHEDULERS, parameter_specs, usable_schedulers
from runners.run.capacity_estimate import low_load_warning
from runners.store import result_store
from runners.study.runner import MAX_RUNS_UNCONFIRMED
from runners.workload.slo import PAPER_SLOS, TASKS

use_app_navigation()  # a first visit straight to this page: app.py's sidebar, not the folder's
st.set_page_config(page_title="schedlab · Launch", layout="wide")
ROOT = result_store.DEFAULT_RESULTS_DIR
FIELD = "f:"  # session-state prefix of every form field; the rest of the key is the config path
ERRORS = "launch_errors"
STORE_ERROR = "launch_store_error"
PACES = {"as fast as possible": None, "100x": 100.0, "10x": 10.0, "real time": 1.0}
DEFAULT_PACE = "100x"

TPOT_UNIT = metric("tpot_s.mean").unit  # the TPOT limits are typed in the catalog's display unit


#: The simulator's engine.planning_model choices as the form names them.
PLANNING_MODELS = {"fitted": "fitted to a profile (default)", "engine-truth": "the engine's own model (oracle)"}


def key(path: str) -> str:
    return FIELD + path


#: The fields whose errors this run of the page showed under them (the page runs top to bottom
#: on every interaction, so this starts empty each time).
shown: set[str] = set()


def error_under(*paths: str, label: str | None = None) -> None:
    """Show the errors of these fields right under them, each named by ``label`` (the field's
    label as the form shows it) or the place's name (launch_form.group_label), never its config path."""
    for path in paths:
        shown.add(path)
        message = st.session_state.get(ERRORS, {}).get(path)
        if message:
            st.error(f"**{label or group_label(path)}**: {message}", icon="⚠️")


def engine_changed() -> None:
    """Radio callback: the engine fields every engine shares a widget for (the same key) are
    written through the Session State API, which the browser adopts (a removed value is not: the
    browser kept showing, and sent back, the simulator's 16 slots as vLLM's --max-num-seqs), and
    the errors of the last launch that concern the engine are dropped (their fields may be gone)."""
    defaults = engine_field_defaults(st.session_state.get(key("engine.kind"), "sim"))
    for name in [name for name in st.session_state if isinstance(name, str) and name.startswith(FIELD + "engine.")]:
        if name != key("engine.kind") and isinstance(st.session_state[name], str):
            st.session_state[name] = defaults.get(name[len(FIELD) :], "")
    errors = st.session_state.get(ERRORS) or {}
    st.session_state[ERRORS] = {
        path: message
        for path, message in errors.items()
        if not path.startswith("engine") and path not in ("schedulers", "trials.baseline")
    }


def number(label: str, path: str, value=None, help: str | None = None, placeholder: str | None = None):
    """A number field, drawn as a text input: the launch validates exactly the text the field shows
    (a browser number input keeps its last valid value while it shows an invalid one, and that
    value would launch); text that is no number, or out of bounds, is an error under the field."""
    st.text_input(
        label,
        key=key(path),
        value=field_text(value),
        help=help,
        placeholder=placeholder or ("blank = the default" if value is None else None),
    )
    error_under(path, label=label)


def text(label: str, path: str, value: str = "", help: str | None = None, placeholder: str | None = None):
    st.text_input(label, key=key(path), value=value, help=help, placeholder=placeholder)
    error_under(path, label=label)


def adapter_input(field: FormField) -> None:
    """One engine-specific input, as its adapter describes it. A flag that sets a value other
    than True (``--scheduling-policy priority``) is kept under ``ui:flag:<path>``."""
    if field.widget == "text":
        text(field.label, field.path, help=field.help or None)
    elif field.widget in ("int", "float"):
        number(field.label, field.path, None, help=field.help or None)
    elif field.widget == "choice":
        st.selectbox(field.label, list(field.choices), key=key(field.path), help=field.help or None)
        error_under(field.path, label=field.label)
    elif field.flag_value is True:
        st.checkbox(field.label, value=True, key=key(field.path), help=field.help or None)
        error_under(field.path, label=field.label)
    else:
        st.checkbox(field.label, key=f"ui:flag:{field.path}", help=field.help or None)
        error_under(field.path, label=field.label)


def form_values() -> dict:
    """The form's fields as dotted config path -> value (what build_job reads), without the
    engine fields the chosen engine does not offer (launch_form.for_engine)."""
    values = {
        name[len(FIELD) :]: value
        for name, value in st.session_state.items()
        if isinstance(name, str) and name.startswith(FIELD)
    }
    if values.get("engine.kind", "sim") == "sim":
        values["engine.pace"] = PACES.get(st.session_state.get("ui:pace", DEFAULT_PACE))
    if st.session_state.get("ui:priority"):
        values["engine.scheduling_policy"] = "priority"
    values = for_traffic(values, st.session_state.get("ui:traffic", "datasets"))
    adapter = ADAPTERS.get(values.get("engine.kind", "sim"))
    for field in adapter.form_fields if adapter else ():
        if field.widget == "flag" and field.flag_value is not True and st.session_state.get(f"ui:flag:{field.path}"):
            values[field.path] = field.flag_value
    return for_engine(values)


@st.cache_data(max_entries=32, show_spinner=False)
def load_preview(values_json: str) -> list[tuple[str, str | None, str | None]]:
    """(sentence, warning or None, simulator fidelity or None) per arrival rate: the offered load against the
    engine's estimated capacity, and how close the simulator came to the real engine near it."""
    return [
        (load.text, low_load_warning(load) if load.low else None, load.fidelity)
        for load in preview_load(json.loads(values_json))
    ]


def launch() -> None:
    """Button callback: validate every field, then start the job (runs before the page reruns)."""
    values = form_values()
    try:
        for task in TASKS:
            upload = st.session_state.get(f"upload:{task}")
            if values.get(f"workload.{task}.kind") == "file" and upload is not None:
                values[f"workload.{task}.path"] = str(save_upload(upload.name, upload.getvalue(), ROOT))
        result = build_job(values, list(st.session_state.get("schedulers", [])))
        st.session_state[ERRORS] = result.errors
        spec = result.spec if result.ok else None
        folder = start_job(spec, ROOT) if spec is not None else None
    except (SchedlabError, OSError) as exc:  # the results folder cannot hold the upload or the job
        st.session_state[STORE_ERROR] = f"Could not start the job in {ROOT}: {exc}"
        return
    if folder is not None and spec is not None:
        st.session_state["watch_job"] = folder.name
        st.session_state[JOB_SELECT] = folder.name  # the Jobs panel follows the new job at once
        study = spec.study
        what = (
            f"study {study.study_id}: {len(spec.runs)} runs ({len(study.schedulers)} scheduler(s) x "
            f"{len(study.seeds)} seed(s)" + (f" x {len(study.rates)} rates" if study.rates else "") + ")"
            if study is not None
            else f"{len(spec.runs)} run(s)"
        )
        st.session_state["launched"] = f"Started job {spec.job_id} with {what}."


st.title("Launch runs")
st.caption(
    "Every scheduler runs at every seed, paired: at one seed all get the identical workload and arrival "
    "times, so the comparison carries a 95% interval over seeds. The job runs in its own process: close or "
    "reload this page at any time and come back to watch it."
)

# -- live view ---------------------------------------------------------------------------------
st.header("Jobs")
jobs_panel()  # pages/parts/job_panel.py

st.header("New job")
# -- engine ------------------------------------------------------------------------------------
st.subheader("Engine")
kinds = list(ENGINES)
kind = st.radio(
    "Engine",
    kinds,
    key=key("engine.kind"),
    horizontal=True,
    format_func=lambda name: f"{name}: {ENGINES[name].summary}",
    # the simulator's default of 16 slots is no default for a real server's --max-num-seqs
    on_change=engine_changed,
)
error_under("engine.kind", "engine", label="Engine")
# the simulator's preset name and profile path need half the row each (a quarter cut them at 1,024 px)
columns: Sequence[DeltaGenerator] = st.columns(2 if kind == "sim" else 4)
if kind == "sim":
    with columns[0]:
        st.selectbox(
            "Profile preset",
            list(PRESETS),
            key=key("engine.preset"),
            help='Latency coefficients and KV capacity of a measured engine (docs/design.md, "The simulated engine")',
        )
        error_under("engine.preset", label="Profile preset")
    with columns[1]:
        text(
            "Profile file (optional)",
            "engine.profile",
            placeholder="bench/results/tiny-cpu-vllm.profile.yaml",
            help="a profile from `python -m runners profile` or bench/sim_fidelity.py (which adds its fidelity "
            "report against the real engine); overrides the preset",
        )
    columns = st.columns(3)
    with columns[0]:
        number("Instances", "engine.instances", 1)
    with columns[1]:
        number(
            "KV capacity per instance (tokens)",
            "engine.kv_capacity_tokens",
            None,
            help="blank = the preset's capacity (813,104 tokens for Qwen2.5-7B on 2 x V100)",
        )
    with columns[2]:
        number(
            "max_num_seqs",
            "engine.max_num_seqs",
            FORM_DEFAULTS["engine.max_num_seqs"],
            help="requests the engine runs at once; blank = the preset's (256). Fewer slots make requests queue, "
            "which is where schedulers differ",
        )
    st.select_slider(
        "Speed",
        options=list(PACES),
        value=DEFAULT_PACE,
        key="ui:pace",
        help="Simulated seconds per wall second; pacing only delays the run so you can watch it, "
        "every measured value is the same",
    )
    st.checkbox(
        "Priority scheduling in the engine",
        key="ui:priority",
        help="vLLM's --scheduling-policy priority: the engine orders its queue by the scheduler's priority",
    )
    plan_columns = st.columns(2)
    with plan_columns[0]:
        st.selectbox(
            "Latency model the scheduler plans with",
            list(PLANNING_MODELS),
            key=key("engine.planning_model"),
            format_func=PLANNING_MODELS.__getitem__,
            help="slo-sa, scls, mcsf and the alpha baselines predict latencies. fitted: a model fitted to a "
            "noisy profile of this simulated engine, as a real profile would be (its error is kept with the "
            "run); engine-truth: the simulator's own model, which no deployment has (an oracle: its results "
            "are labelled so)",
        )
        error_under("engine.planning_model", label="Latency model the scheduler plans with")
    with plan_columns[1]:
        number(
            "Injected latency-model error (relative std)",
            "engine.planning_error",
            None,
            help="0 to 1: each latency coefficient the scheduler plans with is multiplied by 1 + error x a "
            "standard normal draw (the sensitivity study of Fig. 10 in Huang et al.'s SLO-aware scheduling "
            "paper); blank = 0",
        )
elif kind in ADAPTERS:
    adapter = ADAPTERS[kind]
    with columns[0]:
        text("Model folder", "engine.model", help="local folder (or hub id where the hub is reachable)")
    with columns[1]:
        number("Instances", "engine.instances", 1)
    with columns[2]:
        text(
            "GPUs, one per instance",
            "engine.gpus",
            placeholder="0,1",
            help="CUDA_VISIBLE_DEVICES for each instance, comma-separated; blank = 0, 1, ...",
        )
    with columns[3]:
        text(
            "Latency profile (optional)",
            "engine.profile",
            help="file from `python -m runners profile`; needed by slo-sa, scls, mcsf and the auto SLO",
        )
    inputs = [field for field in adapter.form_fields if field.widget != "flag"]
    for start in range(0, len(inputs), 4):  # the engine's own fields, from its adapter
        for column, field in zip(st.columns(4), inputs[start : start + 4]):
            with column:
                adapter_input(field)
    for field in adapter.form_fields:
        if field.widget == "flag":
            adapter_input(field)
    text(
        "Extra server arguments",
        "engine.extra_args",
        help="appended to the server's argument list (split like a shell would, never run through one)",
    )
else:
    with columns[0]:
        text(
            "Server URLs",
            "engine.urls",
            placeholder="http://gpu-box:8000, http://gpu-box:8001",
            help="base URLs of running vLLM / LMDeploy / OpenAI-compatible servers, comma-separated",
        )
    with columns[1]:
        text("Served model name", "engine.model", help="blank = the first model of /v1/models")
    with columns[2]:
        text(
            "API key environment variable",
            "engine.api_key_env",
            help="name of an environment variable of the dashboard's process; the key is never saved",
        )
    with columns[3]:
        text("Latency profile (optional)", "engine.profile")
    st.checkbox("Servers use --scheduling-policy priority", key="ui:priority")

# -- workload ----------------------------------------------------------------------------------
st.subheader("Workload")
traffic = st.selectbox(
    "Traffic",
    list(TRAFFIC_SHAPES),
    key="ui:traffic",
    format_func=TRAFFIC_SHAPES.__getitem__,
    help="a production trace replays its own arrival times, lengths and tasks (Mooncake hash_ids are shared "
    "prompt blocks); a shared system prompt puts one of a few made-up system prompts before a share of the "
    "requests; multi-turn conversations send each conversation turn by turn, the next turn when the reply has "
    "arrived plus a think time, its prompt the conversation so far. All three give the engine's prefix cache "
    "something to reuse",
)
if traffic == "trace":
    columns = st.columns([3, 1, 1])
    with columns[0]:
        text(
            "Trace file",
            "workload.trace.path",
            "datasets/traces/mooncake_synthetic.jsonl",
            help="Mooncake .jsonl, Azure LLM inference .csv or BurstGPT .csv; synthetic samples of each in "
            "datasets/traces/ (azure_code_synthetic.csv, azure_conv_synthetic.csv, burstgpt_synthetic.csv)",
        )
    with columns[1]:
        number("Speed-up", "workload.trace.speedup", 1.0, help="the trace's offsets are divided by this")
    with columns[2]:
        number("Requests", "workload.requests", FORM_DEFAULTS["workload.requests"], help="the first N records")
    error_under("workload.trace", label="Production trace")
if traffic == "system-prompt":
    columns = st.columns(3)
    with columns[0]:
        number("System prompt (tokens)", "workload.system_prompt.tokens", 512)
    with columns[1]:
        number("Share of requests", "workload.system_prompt.share", 1.0, help="0-1")
    with columns[2]:
        number("Distinct system prompts", "workload.system_prompt.prompts", 1)
    error_under("workload.system_prompt", label="Shared system prompt")
if traffic == "sessions":  # whole conversations, turn by turn (runners.workload.sessions)
    for column, path in zip(st.columns(len(SESSION_FIELDS)), SESSION_FIELDS):
        entry = session_field(path)
        with column:
            if entry.choices:
                st.selectbox(
                    entry.label,
                    list(entry.choices),
                    index=entry.choices.index(entry.default),
                    key=key(path),
                    help=entry.help,
                )
                error_under(path, label=entry.label)
            else:
                number(entry.label, path, entry.default, help=entry.help)
    error_under("workload.multi_turn", "workload.multi_turn.think_time")
dataset_columns = st.columns(2) if traffic != "trace" else []  # a trace brings its own requests
SOURCE_LABELS = {
    "synthetic": "bundled stand-in (synthetic)",
    "hub": "Hugging Face hub id",
    "file": "local path or upload",
}
for column, (task, title) in zip(dataset_columns, (("chat", "Chat (ShareGPT)"), ("code", "Code (Python-Code-23k)"))):
    with column:
        source = st.selectbox(
            f"{title} source",
            ["synthetic", "hub", "file"],
            key=key(f"workload.{task}.kind"),
            format_func=SOURCE_LABELS.__getitem__,
        )
        if source == "hub":
            text(
                "Hub dataset id",
                f"workload.{task}.hub_id",
                help="loaded with the datasets library (needs network access or a local hub cache)",
            )
            text("File inside the dataset (data_files)", f"workload.{task}.data_files")
        elif source == "file":
            text("Local .json / .jsonl (.gz) path", f"workload.{task}.path")
            st.file_uploader(f"…or upload a {task} dataset", type=["json", "jsonl", "gz"], key=f"upload:{task}")
columns = st.columns(4)
if traffic != "trace":  # a trace's tasks, lengths and record count are its own (its Requests field is above)
    with columns[0]:
        number("Chat share", "workload.ratio.chat", 1.0, help="chat:code ratio, e.g. 1 and 1")
    with columns[1]:
        number("Code share", "workload.ratio.code", 1.0)
    with columns[2]:  # "Sessions" for multi-turn traffic: workload.requests counts sessions then
        requests_label, requests_help = requests_field(traffic)
        number(requests_label, "workload.requests", FORM_DEFAULTS["workload.requests"], help=requests_help)
with columns[3]:
    text(
        "Seeds",
        "trials.seeds",
        FORM_DEFAULTS["trials.seeds"],
        help="a count N (seeds 0..N-1, e.g. 5) or a comma-separated list (e.g. 3, 7, 11). At each seed every "
        "scheduler gets the identical requests and arrival times; results carry a 95% interval over seeds. "
        "Blank: one run per scheduler at seed 0, no study",
    )
process = "trace"
if traffic != "trace":  # the arrival process: a trace keeps its own times
    columns = st.columns(3)
    with columns[0]:
        process = st.selectbox(
            "Arrival process",
            ["poisson", "gamma", "constant", "all-at-once"],
            key=key("workload.arrival.process"),
            help="poisson: exponential gaps; gamma: burstiness as vLLM's benchmark; all-at-once: the "
            "papers' offline setting",
        )
        error_under("workload.arrival.process", label="Arrival process")
    with columns[1]:
        if process != "all-at-once":
            number(rate_label(traffic), "workload.arrival.rate", FORM_DEFAULTS["workload.arrival.rate"])
    with columns[2]:
        if process == "gamma":
            number(
                "Burstiness (gamma shape)", "workload.arrival.burstiness", 1.0, help="1 = Poisson; below 1 is burstier"
            )
error_under("workload", "workload.ratio")

# -- SLOs --------------------------------------------------------------------------------------
st.subheader("SLOs")
preset = st.radio(
    "SLO preset",
    ["paper", "auto", "custom"],
    key=key("slo.preset"),
    horizontal=True,
    help="paper: "
    + "; ".join(f"{task} {slo.describe()}" for task, slo in PAPER_SLOS.items())
    + ". auto: 10x each task's lone-request latency from the engine's latency model.",
)
if preset == "custom":
    left, right = st.columns(2)
    for column, task in ((left, "chat"), (right, "code")):
        with column:
            st.markdown(f"**{task}** (blank = not checked)")
            number("TTFT limit (s)", f"slo.{task}.ttft_s", None)
            number(
                f"TPOT limit ({TPOT_UNIT})",
                f"slo.{task}.tpot_ms",
                None,
                help=f"time per output token, {TPOT_UNIT} (the paper's chat limit is 50 ms)",
            )
            number("E2E limit (s)", f"slo.{task}.e2e_s", None)
            error_under(f"slo.{task}")
error_under("slo", "slo.preset")

# -- schedulers --------------------------------------------------------------------------------
st.subheader("Schedulers")
note = unavailable_note(kind)  # engine-* ones unless schedlab launches the vLLM
unavailable = note.schedulers if note is not None else []
offered = [name for name in usable_schedulers() if name not in unavailable]
for problem in SCHEDULER_PROBLEMS:  # a user's scheduler file or entry point that did not load
    st.warning(f"Scheduler not added: {problem}")
if "schedulers" in st.session_state:  # chosen under another engine: drop what this one cannot run
    st.session_state["schedulers"] = [name for name in st.session_state["schedulers"] if name in offered]
else:
    st.session_state["schedulers"] = [name for name in DEFAULT_SCHEDULERS if name in offered]
if st.session_state.get(key("trials.baseline")) in unavailable:
    st.session_state[key("trials.baseline")] = ""
chosen = st.multiselect(
    "Schedulers to compare",
    offered,
    key="schedulers",
    format_func=lambda name: name + (" (inside vLLM)" if SCHEDULERS[name].in_engine else ""),
    help="Each runs at every seed on the same workload and arrival times. engine-* schedulers run "
    "inside a vLLM that schedlab launches (its --scheduler-cls): they are offered only "
    "with engine vllm.",
)
if note is not None:
    st.caption(note.text, help=note.details)  # once, however many schedulers it names
error_under("schedulers", label="Schedulers to compare")
st.selectbox(
    "Baseline",
    [""] + offered,
    key=key("trials.baseline"),
    format_func=lambda name: name or (f"the first scheduler ({chosen[0]})" if chosen else "the first scheduler"),
    help="the scheduler the others are compared with (paired by seed: difference, 95% interval, wins, verdict)",
)
error_under("trials.baseline", label="Baseline")
for name in chosen:
    cls = SCHEDULERS[name]
    with st.expander(f"{name} — {cls.summary}"):
        st.caption(f"From {cls.paper}. Defaults are the registry's (the paper's where it gives one).")
        specs = parameter_specs(name)
        columns = st.columns(3)
        for index, spec in enumerate(specs):
            path = f"scheduler.{name}.{spec.name}"
            label, help_text = parameter_label(name, spec.name)  # the Params field's title and description
            with columns[index % 3]:
                if spec.kind == "choice":
                    st.selectbox(
                        label,
                        list(spec.choices),
                        index=list(spec.choices).index(spec.default),
                        key=key(path),
                        help=help_text,
                    )
                elif spec.kind == "bool":
                    st.checkbox(label, value=bool(spec.default), key=key(path), help=help_text)
                else:  # numbers too: the launch validates the text the field shows (see number())
                    st.text_input(
                        label,
                        value=field_text(spec.default),
                        key=key(path),
                        help=help_text,
                        placeholder="blank = the default" if spec.default is None else None,
                    )
                error_under(path, label=label)

# -- sweep + launch ----------------------------------------------------------------------------
st.subheader("Rate sweep (optional)")
sweep = st.checkbox("Sweep arrival rates (every scheduler at every rate)", key=key("sweep.enabled"))
if sweep:
    columns = st.columns(2)
    with columns[0]:
        text("Rates (req/s)", "sweep.rates", "1, 2, 4, 8")
    with columns[1]:
        st.slider("Capacity target: SLO attainment", 0.5, 1.0, 0.9, 0.01, key=key("sweep.target"))
        error_under("sweep.target", label="Capacity target: SLO attainment")
planned = study_size(form_values(), chosen)
if planned is not None and planned > MAX_RUNS_UNCONFIRMED:
    st.checkbox(f"Run a study of {planned:,} runs (more than {MAX_RUNS_UNCONFIRMED:,})", key=key("trials.confirm"))
error_under("trials.confirm", label="Confirmation")
text("Job label (optional)", "job.label")

# -- offered load: could the schedulers differ? ------------------------------------------------
preview = load_preview(json.dumps(form_values(), sort_keys=True, default=str))
for sentence, warning, fidelity in preview:
    if warning:
        st.warning(f"{sentence} {warning}", icon="⚠️")
    else:
        st.info(sentence)
    if fidelity:
        st.caption(f"Fidelity: {fidelity}.")
if planned is not None:
    st.caption(f"This launch is one study of {planned:,} run(s).")
elif single := single_runs_warning(form_values()):
    st.warning(single, icon="⚠️")
st.button("Launch", type="primary", on_click=launch, key="launch")
if errors := st.session_state.get(ERRORS):
    elsewhere = {path: message for path, message in errors.items() if path not in shown}  # no field on the page now
    st.error(
        f"{len(errors)} field(s) need attention"
        + ("; each error is shown under its field." if not elsewhere else ":")
        + "".join(f"\n- **{group_label(path)}**: {message}" for path, message in elsewhere.items())
    )
if st.session_state.get(STORE_ERROR):
    st.error(st.session_state.pop(STORE_ERROR))
if st.session_state.get("launched"):
    st.success(st.session_state.pop("launched"))
