"""NVIDIA GPUs through NVML: the one package that names NVML's functions (with `host/`, the
transport that calls them live, replays them from a snapshot or records them)."""
