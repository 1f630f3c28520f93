"""The kubelet's PodResources API."""
