#!/usr/bin/env bash
# The node agent's NVML path on a real GPU in one go (issue 39): the agent's report, its device
# plugins' ListAndWatch, and the usage reader while a process holds GPU memory (bench/gpu_check.py).
# Reads only; changes no GPU setting; needs the NVIDIA driver, Python 3.10-3.12, no CUDA toolkit.
#
#   bench/gpu_check.sh prepare        # here, with the package registry: wheels of the agent's runtime
#                                     # dependencies (no numpy: the agent's path does not import it)
#                                     # for CPython 3.10-3.12 into .gpu-wheels/ (git-ignored, ~25 MiB)
#   bench/gpu_check.sh                # on the GPU machine: installs them offline into a venv when the
#                                     # imports fail, then runs the checks; the report goes to
#                                     # $OUT/gpu-check.json when OUT is set
#
# With the device tool: run(command="bash bench/gpu_check.sh", carry=[".gpu-wheels"], timeout_s=420).
# kubelet's own device manager (kubelet-harness) is used when build-binaries.sh's cache has it; the
# test suite's Python kubelet otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
DEPS=(msgspec pyyaml grpcio protobuf nvidia-ml-py prometheus-client typing-extensions)

if [[ "${1:-}" == "prepare" ]]; then
  py="${PYTHON:-.venv/bin/python}"
  for v in 3.10 3.11 3.12; do
    "$py" -m pip download -q --only-binary=:all: --platform manylinux2014_x86_64 --python-version "$v" \
      -d .gpu-wheels "${DEPS[@]}"
  done
  du -sh .gpu-wheels
  exit 0
fi

PY="${PYTHON:-python3}"
if ! PYTHONPATH=src "$PY" -c "import msgspec, yaml, grpc, google.protobuf, pynvml, prometheus_client" 2>/dev/null; then
  [[ -d .gpu-wheels ]] || { echo "error: the agent's dependencies are missing and there is no .gpu-wheels/ (run 'bench/gpu_check.sh prepare' where the registry is reachable, and carry it)" >&2; exit 2; }
  "$PY" -m venv /tmp/devshare-gpu-venv
  /tmp/devshare-gpu-venv/bin/pip install -q --no-index --find-links .gpu-wheels "${DEPS[@]}"
  PY=/tmp/devshare-gpu-venv/bin/python
fi
echo "== nvidia-smi"; nvidia-smi || true
PYTHONPATH=src:tests "$PY" bench/gpu_check.py "$@"
