"""Readers of the container stack's configuration: containerd, Docker, CRI-O, the NVIDIA
Container Toolkit, CDI specs and the device plugin's config. Every reader takes any bytes and
answers with what the file says or the problem that names it, never an exception."""
