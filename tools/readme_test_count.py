"""The README's test count, generated (issue 27 defect 14): collects the suite as README's test
command does (``python -m pytest --collect-only -q``) and prints the count; with ``--write`` it
rewrites the figure in README.md ("the whole suite with them: N tests"). tests/unit/test_docs.py
checks the README against the collection.

Usage: python tools/readme_test_count.py [--write]
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: Where README.md states the count.
PATTERN = re.compile(r"(the whole suite\s+with them: )([\d,]+)( tests)")


def collected() -> int:
    """How many tests ``python -m pytest --collect-only -q`` collects in the repository with the
    real-vLLM end-to-end module counted (as CI runs it): its module skips itself at collection
    without ``SCHEDLAB_VLLM_PYTHON``, so collection is given one (nothing runs)."""
    env = {**os.environ, "SCHEDLAB_VLLM_PYTHON": os.environ.get("SCHEDLAB_VLLM_PYTHON") or sys.executable}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    match = re.search(r"^(\d+) tests? collected", out, re.M)
    if match is None:
        raise SystemExit(f"pytest printed no count: {out[-300:]}")
    return int(match.group(1))


def stated(text: str) -> int:
    """The count README.md states."""
    match = PATTERN.search(text)
    if match is None:
        raise SystemExit("README.md: no 'the whole suite with them: N tests'")
    return int(match.group(2).replace(",", ""))


def main() -> None:
    count = collected()
    print(f"{count:,} tests collected")
    if "--write" in sys.argv[1:]:
        text = README.read_text()
        README.write_text(PATTERN.sub(lambda m: f"{m.group(1)}{count:,}{m.group(3)}", text, count=1))


if __name__ == "__main__":
    main()
