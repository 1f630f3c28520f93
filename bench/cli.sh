#!/usr/bin/env bash
# gpuprobe's command-line latency: `--help` (target < 0.3 s) and `check --snapshot` on an
# 8-GPU snapshot (target < 1 s), beside a bare Python start-up as the floor, in one hyperfine
# run. Usage: bench/cli.sh [hyperfine flags...]   (from the repository root, after install)
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
snap=tests/snapshots/synthetic-h100-8gpu-healthy
hyperfine --warmup 3 --runs 30 -N "$@" \
    --command-name "python -c pass (floor)" "$py -c pass" \
    --command-name "gpuprobe --help" "$py -m gpuprobe --help" \
    --command-name "gpuprobe check --snapshot (8 GPUs)" "$py -m gpuprobe check --snapshot $snap"
