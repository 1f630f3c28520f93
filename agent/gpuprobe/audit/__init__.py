"""`gpuprobe audit`: ask many agents for their reports at once and build the cluster report.

`fanout` calls GetReport on every target concurrently, all within one deadline, and `shards`
splits that over processes for thousands of targets; `facts` reads each node's versions,
layouts and counts from its checks' data; `usage` sums the nodes' GPU usage; `skew` finds the
majority value of each fact and the nodes that differ; `cluster` puts nodes, skew and totals
into one report with its status; `render` prints it for people; `run` ties them together.
"""
