"""Generated client code for the kubelet's PodResources API v1 (scripts/generate_proto.py)."""
