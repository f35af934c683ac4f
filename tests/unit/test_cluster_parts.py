"""Issue 32's parts, one at a time, with hand-worked numbers: how many members fit a Ray cluster,
the Ray options of a member, the GPUs a placed member's servers get, a run folder sent back to the
head and put in place, the study's note when paired members ran on different hardware, emptying an
attached server's prefix cache (against a local HTTP server answering as vLLM and SGLang do), and
the host record of engine.json."""

from __future__ import annotations

import io
import socket
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from runners.app.cli import parse_resources
from runners.engines.cache_reset import reset_prefix_cache
from runners.engines.gpu import host_record
from runners.errors import ConfigError, SchedlabError
from runners.run.config import parse_config
from runners.store.models import StudyRecord
from runners.study.cluster import land_folder, pack_folder, placed, ray_options, slots
from runners.study.runner import hardware_note, placement_notes, plan_study, seed_by_seed, study_lines

CLUSTER = {"CPU": 8.0, "GPU": 8.0, "gpu": 2.0, "memory": 1e10, "node:10.0.0.1": 1.0}


def test_slots_is_the_scarcest_resource_over_what_a_member_holds():
    assert slots(CLUSTER, {"CPU": 1.0, "GPU": 1.0}) == 8  # min(8/1, 8/1)
    assert slots(CLUSTER, {"CPU": 4.0, "GPU": 1.0}) == 2  # CPU: 8/4
    assert slots(CLUSTER, {"CPU": 3.0, "GPU": 2.0}) == 2  # min(floor(8/3), 8/2)
    assert slots(CLUSTER, {"gpu": 1.0, "CPU": 0.0}) == 2  # a zero never limits
    with pytest.raises(SchedlabError, match=r"each member needs TPU=1 but the Ray cluster has TPU=0 \(CPU=8, GPU=8"):
        slots(CLUSTER, {"TPU": 1.0})
    with pytest.raises(SchedlabError, match="needs GPU=16"):
        slots(CLUSTER, {"GPU": 16.0})


def test_ray_options_take_cpu_and_gpu_as_keywords_and_the_rest_as_custom():
    assert ray_options({"CPU": 1.0, "GPU": 2.0}) == {"num_cpus": 1.0, "num_gpus": 2.0}
    assert ray_options({"gpu": 1.0, "CPU": 0.0}) == {"num_cpus": 0.0, "num_gpus": 0.0, "resources": {"gpu": 1.0}}


def test_member_resources_flag():
    assert parse_resources("gpu=1") == {"gpu": 1.0}
    assert parse_resources("GPU=2, CPU=0.5") == {"GPU": 2.0, "CPU": 0.5}
    for bad, why in (("gpu", "expected NAME=AMOUNT"), ("gpu=x", "expected NAME=AMOUNT"), ("gpu=1,gpu=2", "twice")):
        with pytest.raises(ConfigError, match=why) as caught:
            parse_resources(bad)
        assert caught.value.field == "--member-resources"


def _member(instances: int, use_gpus: bool = True):
    config = parse_config(
        {
            "engine": {"kind": "vllm", "model": "m", "instances": instances, "use_gpus": use_gpus},
            "trials": {"seeds": [0]},
        }
    )
    return plan_study(config).members[0]


def test_a_placed_member_splits_its_gpus_over_its_instances():
    assert placed(_member(2), ["3", "5"]).config.engine.gpus == ["3", "5"]
    assert placed(_member(1), ["3", "5"]).config.engine.gpus == ["3,5"]  # tensor parallel over both
    assert placed(_member(2), ["0", "1", "2", "3"]).config.engine.gpus == ["0,1", "2,3"]
    for member, ids in ((_member(2), []), (_member(2), ["0", "1", "2"]), (_member(1, use_gpus=False), ["0"])):
        assert placed(member, ids) is member  # no GPUs, uneven, or a CPU build: unchanged


def test_a_run_folder_sent_back_lands_whole_and_never_over_another(tmp_path):
    source = tmp_path / "node" / "m0"
    (source / "sub").mkdir(parents=True)
    (source / "summary.json").write_text('{"status": "done"}')
    (source / "sub" / "server-0.log").write_bytes(b"\x00\x01log")
    data = pack_folder(source)
    base = tmp_path / "head"
    landed = land_folder(base, "m0", data)
    assert landed == base / "m0"
    assert (landed / "summary.json").read_text() == '{"status": "done"}'
    assert (landed / "sub" / "server-0.log").read_bytes() == b"\x00\x01log"
    assert sorted(path.name for path in base.iterdir()) == ["m0"]  # no hidden leftovers
    with pytest.raises(SchedlabError, match="exists already"):
        land_folder(base, "m0", data)
    evil = io.BytesIO()
    with tarfile.open(fileobj=evil, mode="w") as archive:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 2
        archive.addfile(info, io.BytesIO(b"hi"))
    with pytest.raises(tarfile.TarError):
        land_folder(base, "m1", evil.getvalue())
    assert not (base / "escaped.txt").exists() and not (tmp_path / "escaped.txt").exists()
    assert sorted(path.name for path in base.iterdir()) == ["m0"]


def _study(hardware: dict[tuple[str, int], str | None]) -> StudyRecord:
    runs = [
        {"run_id": f"{name}-s{seed}", "scheduler": name, "seed": seed, "status": "done", "hardware": kind}
        for (name, seed), kind in hardware.items()
    ]
    return StudyRecord.model_validate(
        {
            "schema_version": 4,
            "study_id": "h",
            "baseline": "fcfs",
            "schedulers": ["fcfs", "slo-sa"],
            "runs": runs,
            "statistics": {},
        }
    )


def test_the_study_says_when_paired_members_ran_on_different_hardware():
    h100, a100 = "1 x NVIDIA H100 80GB HBM3 (driver 550.54)", "1 x NVIDIA A100-SXM4-80GB (driver 550.54)"
    same = _study({("fcfs", 0): h100, ("slo-sa", 0): h100, ("fcfs", 1): a100, ("slo-sa", 1): a100})
    assert hardware_note(same) is None  # seeds may differ from each other; pairs may not
    mixed = _study({("fcfs", 0): h100, ("slo-sa", 0): a100, ("fcfs", 1): h100, ("slo-sa", 1): h100})
    assert hardware_note(mixed) == (
        f"not on identical hardware: at 1 of 2 seeds the paired members ran on different machines "
        f"({a100}; {h100}), seeds 0; their differences include the hardware's"
    )
    assert hardware_note(_study({("fcfs", 0): None, ("slo-sa", 0): h100})) is None  # nothing says
    mixed.runs[1].cache_reset = "the prefix cache of http://b:1 could not be emptied (/reset_prefix_cache: HTTP 404)"
    notes = placement_notes(mixed)
    assert notes == [
        hardware_note(mixed),
        "prefix caches not emptied between members: the prefix cache of http://b:1 could not be emptied "
        "(/reset_prefix_cache: HTTP 404)",
    ]
    assert all(note in study_lines(mixed) for note in notes)  # the CLI's lines; the Results page shows them too


class _Engine(BaseHTTPRequestHandler):
    """Answers POST as a server whose reset endpoints are ``served`` (others 404), counting them."""

    served: set[str] = set()
    calls: list[tuple[str, str | None]] = []

    def do_POST(self):
        type(self).calls.append((self.path, self.headers.get("Authorization")))
        self.send_response(200 if self.path in self.served else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def engine_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Engine.calls = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_prefix_cache_is_emptied_where_the_engine_offers_it(engine_server):
    _Engine.served = {"/reset_prefix_cache"}  # vLLM with VLLM_SERVER_DEV_MODE=1
    assert reset_prefix_cache(engine_server + "/v1", {"Authorization": "Bearer k"}) is None
    assert _Engine.calls == [("/reset_prefix_cache", "Bearer k")]
    _Engine.calls, _Engine.served = [], {"/flush_cache"}  # SGLang
    assert reset_prefix_cache(engine_server) is None
    assert [path for path, _ in _Engine.calls] == ["/reset_prefix_cache", "/flush_cache"]
    _Engine.served = set()  # vLLM without dev mode, LMDeploy
    why = reset_prefix_cache(engine_server)
    assert why is not None
    assert (
        f"the prefix cache of {engine_server} could not be emptied (/reset_prefix_cache: HTTP 404; /flush_cache: HTTP 404)"
        in why
    )
    assert "VLLM_SERVER_DEV_MODE=1" in why
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    assert "could not be emptied" in reset_prefix_cache(f"http://127.0.0.1:{port}")  # nothing listening: said


def test_the_host_record_names_this_machine():
    host = host_record()
    assert host["hostname"] == socket.gethostname() and host["ray_node_id"] is None
    assert host["gpus"] == [] and host["hardware"] == f"CPU: {host['cpu'] or 'unknown'}"  # no GPU here


def test_real_members_side_by_side_run_seed_by_seed():
    """On Ray or a pool, a seed's members start together (the same conditions for a pair)."""
    config = parse_config(
        {"engine": {"kind": "vllm", "model": "m"}, "trials": {"schedulers": ["fcfs", "slo-sa"], "seeds": [0, 1, 2]}}
    )
    members = plan_study(config).members
    assert [(m.scheduler, m.seed) for m in members][:3] == [("fcfs", 0), ("fcfs", 1), ("fcfs", 2)]  # the plan
    assert [(m.scheduler, m.seed) for m in seed_by_seed(members)] == [
        ("fcfs", 0), ("slo-sa", 0), ("fcfs", 1), ("slo-sa", 1), ("fcfs", 2), ("slo-sa", 2)
    ]  # fmt: skip
    rated = parse_config(
        {
            "engine": {"kind": "vllm", "model": "m"},
            "trials": {"schedulers": ["fcfs", "slo-sa"], "seeds": [0, 1], "rates": [4, 2]},
        }
    )
    order = [(m.rate, m.seed, m.scheduler) for m in seed_by_seed(plan_study(rated).members)]
    assert order[:4] == [(2.0, 0, "fcfs"), (2.0, 0, "slo-sa"), (2.0, 1, "fcfs"), (2.0, 1, "slo-sa")]
