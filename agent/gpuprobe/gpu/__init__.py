"""What gpuprobe knows of GPUs, read through NVML and the host: the PCI bus, NVIDIA's CUDA
driver table, each GPU's identity and health, and XIDs (the catalog, the kernel log, the
sticky state)."""
