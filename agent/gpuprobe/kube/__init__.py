"""The Kubernetes API client and its verbs: nodes, events, pods, objects, the cluster reader.

`api` is the thin wrapper over the client library (lightkube, imported only when the feature
is on), `bounded` its bounds on every response. What gpuprobe writes to its node, and when,
is decided in `gpuprobe.effects`.
"""
