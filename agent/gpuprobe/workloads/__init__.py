"""Readers of who uses the node's GPUs: the kubelet's allocations, processes' cgroups, pods.

Facts only: which pods and containers the kubelet gave each GPU and MIG device, and which
pod each GPU process belongs to. The `workloads` check judges them.
"""
