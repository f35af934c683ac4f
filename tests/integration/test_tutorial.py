"""docs/tutorial-own-scheduler.md runs exactly as written (issue 30): every ``<!-- file: NAME -->``
python block is written to a fresh folder outside the repository, every ``$`` command of its
console blocks is run there in order (split like a shell would, never through one), and each
output line the page shows (``...`` elides) is in the command's output. Under ``<!-- numbers
vary -->`` the digits are masked on both sides (timings). The study's figures come from the
simulator, which is deterministic, so they are compared as printed."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial-own-scheduler.md"
BLOCK = re.compile(r"(?:<!-- (?P<marker>[^>]*) -->\n)?```(?P<lang>\w+)\n(?P<body>.*?)\n```", re.S)


def blocks() -> list[tuple[str, str, str]]:
    """(marker, language, body) of every fenced block, in page order."""
    return [(m["marker"] or "", m["lang"], m["body"]) for m in BLOCK.finditer(TUTORIAL.read_text())]


def sessions(body: str) -> list[tuple[str, list[str]]]:
    """The ``$`` commands of a console block, each with the output lines shown under it."""
    out: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        elif out:
            out[-1][1].append(line)
    return out


def _mask(text: str) -> str:
    return re.sub(r"\d+", "#", text)


@pytest.mark.e2e
def test_the_tutorial_runs_as_written(tmp_path):
    work = tmp_path / "my_work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SCHEDLAB_RESULTS_DIR": str(tmp_path / "results")}
    env.pop("SCHEDLAB_SCHEDULER_PATH", None)
    ran = 0
    for marker, lang, body in blocks():
        if marker.startswith("file: "):
            assert lang == "python"
            (work / marker.removeprefix("file: ")).write_text(body + "\n")
            continue
        if lang != "console":
            continue
        for command, shown in sessions(body):
            words = shlex.split(command)
            assert words[0] == "python", command
            done = subprocess.run(
                [sys.executable, *words[1:]], cwd=work, env=env, capture_output=True, text=True, timeout=600
            )
            assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
            printed = done.stdout + done.stderr
            lines = {line.rstrip() for line in printed.splitlines()}
            if marker == "numbers vary":
                lines = {_mask(line) for line in lines}
            for line in shown:
                if line.strip() in ("", "..."):
                    continue
                wanted = _mask(line.rstrip()) if marker == "numbers vary" else line.rstrip()
                assert wanted in lines, f"{command}: the page shows\n{line}\nnot printed:\n{printed}"
            ran += 1
    assert ran == 6  # schedulers, check-scheduler, capacity, two studies, who_pays
