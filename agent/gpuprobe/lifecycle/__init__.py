"""What the cloud says about this node's end, and whether the kubelet will let pods end well.

Readers only: `provider` finds the cloud from DMI, `notices` asks its metadata service for
preemption, maintenance and rebalance notices (each provider's documented protocol), and
`kubelet` reads the kubelet's graceful node shutdown settings. They return typed facts; the
`lifecycle` check judges them.
"""
