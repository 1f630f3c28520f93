"""NVIDIA's rules: the checks wholly NVIDIA's and NVIDIA's part of the vendor-neutral ones."""
