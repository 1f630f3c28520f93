#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and PyTorch: the NCCL rank program of `gpuprobe mesh
# --transport nccl` at world size 1 (one node, one GPU), its table read by gpuprobe's nccl-tests
# parser. One GPU cannot hold two ranks, so the bus bandwidth is 0 by definition (2(n-1)/n);
# what this shows is that the program runs through PyTorch's NCCL backend and prints a table
# the parser reads, with the algorithm bandwidth and a validated result. Prints to stdout.
set -uo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp); trap 'rm -f "$log"' EXIT
echo "== nccl rank program, world size 1"
python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
start=$(date +%s.%N)
MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 NNODES=1 \
  timeout 240 python3 agent/gpuprobe/mesh/nccl_rank.py -b 1M -e 1G -f 4 -n 20 -w 5 >"$log" 2>&1
rc=$?
end=$(date +%s.%N)
cat "$log"
echo "rank program: rc $rc in $(python3 -c "print('%.2f' % ($end - $start))") s"
PYTHONPATH=agent python3 - "$log" <<'PY'
import sys
from gpuprobe.measure.nccl import parse_output
result = parse_output(open(sys.argv[1]).read())
top = result.largest
print(f"parsed: {len(result.rows)} rows; largest {top.size_bytes} B: algbw "
      f"{top.out_of_place_algbw / 1e9:.2f} GB/s, busbw {top.out_of_place_busbw / 1e9:.2f} GB/s, "
      f"wrong {result.wrong_values}, avg busbw {result.average_busbw}")
PY
