"""Telling Kubernetes what gpuprobe found: node conditions, events and opt-in taints.

`conditions`, `events` and `taints` decide (pure functions of a report and the node's
object); `api` is the thin wrapper over the client library (lightkube, imported only when
the feature is on); `publisher` applies the decisions after each round, with backoff.
"""
