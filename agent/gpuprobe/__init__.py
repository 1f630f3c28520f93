"""gpuprobe: a node-level GPU diagnostics agent for Kubernetes GPU clusters."""

__version__ = "0.1.0"
