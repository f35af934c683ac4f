"""The Launch page's Jobs panel (not a page itself: app.py's st.navigation lists the pages): the job
drop-down, a job's state and Cancel, its progress and runs, and the running run live. Reads the job
folders (runners.app.jobs), the run folders and the study's study.json (runners.views.live) and draws
with runners.views.charts."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import streamlit as st

from runners.app.jobs import JobStatus, cancel_job, list_jobs
from runners.store import result_store

if TYPE_CHECKING:
    from runners.store.models import JobRunStatus, StudyRun
    from runners.views.live import LiveSnapshot, StudyProgress

# A job's live view imports what it draws with (pandas, plotly, the run readers) when a job is
# shown: the Launch page of a server without jobs opens without them (issue 42).

JOB_SELECT = "job_select"  # the Jobs panel's drop-down: the job the live view follows
CARDS_PER_ROW = 3  # labels stay whole at 1,024 px (four cut 'elapsed, simulated (s)')


def job_label(job) -> str:
    """The drop-down's text for a job: id, label and its state now."""
    return f"{job.job_id} · {job.spec.label} · {job.state}"


@st.fragment(run_every=1.0)
def jobs_panel() -> None:
    """The job drop-down and the live view of the job it shows, redrawn every second (labels follow
    each job's state); a launch selects the new job (``launch`` sets the drop-down's state)."""
    root = result_store.DEFAULT_RESULTS_DIR
    jobs = list_jobs(root)
    if not jobs:
        st.info("No jobs yet. Configure one below; it appears here and keeps running if you close the page.")
        return
    names = [job.job_id for job in jobs]
    by_id = {job.job_id: job for job in jobs}
    if st.session_state.get(JOB_SELECT) not in names:  # first visit, or the followed job is gone
        watched = st.session_state.get("watch_job")
        st.session_state[JOB_SELECT] = (
            watched if watched in names else next((job.job_id for job in jobs if job.active), names[0])
        )
    selected = st.selectbox("Job", names, key=JOB_SELECT, format_func=lambda name: job_label(by_id[name]))
    st.session_state["watch_job"] = selected
    live_view(by_id[selected], root)


def live_view(job: JobStatus, root: Path) -> None:
    """One job: its state, Cancel while it runs, every run with its results, the running run live."""
    _job_header(job)
    run_id, snapshot, progress = _job_progress(job, root)
    if run_id is None:
        st.caption("Starting the worker…")
        return
    if snapshot is None:
        st.caption(f"Waiting for {run_id} to start…")
        return
    _run_live(run_id, snapshot)
    if not job.active:
        _job_end(job, root, progress)


def _job_header(job: JobStatus) -> None:
    """The job's label, state and study, and Cancel while it runs."""
    job_id = job.job_id
    study = job.spec.study
    head = st.columns([3, 1])
    with head[0]:
        st.markdown(
            f"**{job.spec.label or job.job_id}** — state **{job.state}**, "
            f"{len(job.spec.runs)} run(s)"
            + (f", study **{study.study_id}**, baseline {study.baseline}" if study else "")
        )
    with head[1]:
        if job.active and st.button("Cancel job", key=f"cancel-{job_id}"):
            cancel_job(job.folder)
            st.toast(
                "Cancel requested: every running run stops (its launched servers too) and keeps its rows; "
                "runs not started are skipped"
            )


def _job_progress(job: JobStatus, root: Path) -> tuple[str | None, LiveSnapshot | None, StudyProgress | None]:
    """The job's progress bar and its runs' table; the run to show live (the current one, else the
    last one started), its snapshot, and the study's progress (None: not a study)."""
    import pandas as pd

    from runners.views.live import (
        job_progress,
        job_run_rows,
        job_run_states,
        read_live,
        read_study_progress,
        running_member_rows,
    )

    study = job.spec.study
    progress = read_study_progress(root, study.study_id) if study is not None else None
    reported: dict[str, JobRunStatus | StudyRun] = {str(entry.run_id): entry for entry in job.runs}
    if progress is not None:  # a study's statuses come from its study.json
        reported.update({str(entry.run_id): entry for entry in progress.record.runs if entry.status != "pending"})
    run_id = job.current_run_id if job.active else None
    run_id = run_id or next(
        (run.run_id for run in reversed(job.spec.runs) if run.run_id is not None and (root / run.run_id).exists()), None
    )
    snapshot = read_live(root / run_id) if run_id is not None else None
    states = job_run_states(root, job.spec.runs, reported)  # after the snapshot: the folders say last
    execution = progress.record.execution if progress is not None else None
    running = running_member_rows(job.spec.runs, states)
    # a Ray study runs as many members at once as its cluster's resources allow: as many as run now
    workers = execution.workers if execution is not None and execution.workers else max(1, len(running))
    overall = job_progress(job.spec.runs, states, workers)
    if progress is not None or len(job.spec.runs) > 1:
        st.progress(overall.fraction(), text=overall.text(study.study_id if study is not None else None))
    if progress is not None and running and (len(running) > 1 or any(row["node"] != "this machine" for row in running)):
        st.markdown(f"**Running now** ({len(running)}): each member with its node and progress")
        st.dataframe(pd.DataFrame(running).dropna(axis=1, how="all"), hide_index=True)
    with st.expander(
        f"Runs of this job ({len(job.spec.runs)}): each one's results once it ends", expanded=len(job.spec.runs) <= 12
    ):
        table = pd.DataFrame(job_run_rows(root, job.spec.runs, reported, snapshot, states))
        st.dataframe(table.dropna(axis=1, how="all"), hide_index=True)  # no error column without errors
    return run_id, snapshot, progress


def _run_live(run_id: str, snapshot: LiveSnapshot) -> None:
    """The live run: its progress, how it ended (a cancel in neutral colour, a failure in red),
    cards, charts and server logs."""
    from runners.views.charts import live_instance_series, live_latency_scatter, live_prefix_hit_rate
    from runners.views.prefix_view import HIT_RATE_CAPTION, has_prefix_counters

    eta = f" — {snapshot.eta.text()}" if snapshot.eta is not None else ""
    st.progress(snapshot.fraction, text=f"{run_id}: {snapshot.progress_text()}{eta}")
    notice = snapshot.notice()
    if notice is not None:
        kind, text = notice
        (st.info if kind == "info" else st.error)(text)
    clock_help = "the clock of the charts' time axes" + (
        ": simulated seconds, not wall time (the Speed setting only paces them)" if snapshot.simulated else ""
    )
    cards: list[tuple[str, str, str | None]] = [(label, value, None) for label, value in snapshot.cards()]
    cards += [snapshot.throughput_card(), (*snapshot.clock_card(), clock_help)]
    cards += [(label, value, None) for label, value in snapshot.engine_cards()]  # an in-engine scheduler's
    for start in range(0, len(cards), CARDS_PER_ROW):
        for cell, (label, value, help_text) in zip(st.columns(CARDS_PER_ROW), cards[start : start + CARDS_PER_ROW]):
            cell.metric(label, value, help=help_text)
    # the time axes say which clock they run on (simulated seconds on the simulator)
    scheduler = snapshot.header.scheduler  # the charts in its colour, as on every page
    st.plotly_chart(
        live_latency_scatter(snapshot.requests, simulated=snapshot.simulated, scheduler=scheduler),
        key=f"live-lat-{run_id}",
    )
    st.plotly_chart(
        live_instance_series(snapshot.timeseries, simulated=snapshot.simulated, scheduler=scheduler),
        key=f"live-ts-{run_id}",
    )
    if has_prefix_counters(snapshot.timeseries):  # an engine that reports its prefix cache
        st.plotly_chart(
            live_prefix_hit_rate(snapshot.timeseries, simulated=snapshot.simulated, scheduler=scheduler),
            key=f"live-prefix-{run_id}",
        )
        st.caption(HIT_RATE_CAPTION)
    for name, tail in snapshot.logs.items():
        with st.expander(f"{name} (last lines)", expanded=snapshot.status == "failed"):
            st.code(tail or "(empty)", language=None)


def _job_end(job: JobStatus, root: Path, progress: StudyProgress | None) -> None:
    """A finished job: the identical-decisions note of its study, and the link to compare its runs."""
    from runners.app.launch_form import results_link
    from runners.study.runner import identical_decisions_note

    study = job.spec.study
    if progress is not None and progress.finished and study is not None:
        notes = st.session_state.setdefault("identical_notes", {})  # read the members' rows once
        if study.study_id not in notes:
            notes[study.study_id] = identical_decisions_note(root, progress.record)
        if notes[study.study_id]:
            st.warning(notes[study.study_id])
    st.page_link(
        "pages/2_Results.py",
        label="Compare these runs on the Results page",
        icon="📊",
        query_params=results_link(job.spec),
    )
