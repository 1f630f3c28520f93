"""The kubelet's APIs that gpuprobe is a client of."""
