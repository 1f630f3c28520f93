"""The NCCL all-reduce between nodes, run by Kubernetes (`gpuprobe mesh --transport nccl`)."""
