"""What gpuprobe does to the cluster: the effects of a report on its node.

Planners are pure functions of a report and the node's object (`conditions`, `events`,
`taints`, `terminating`); appliers (`appliers`, over the node as last seen, `view`) write what
the planners call for and the node does not say yet; `node.NodeEffects` lists the appliers the
configuration turns on; `loop.EffectsLoop` runs them on one thread with a priority budget
(`budget`: notices first), backoff, conflict retry (`view`) and the fleet brake (`brake`).
`daemon` wires the loop into `serve`, `once` is `check --publish`, `readback` what `audit`
reads back. The API client and its verbs are `gpuprobe.kube`'s.
"""
