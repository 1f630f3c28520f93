"""Active measurements: bandwidth between agents, RDMA perftest, NCCL tests, storage
throughput. They load the node (disk, network) within stated bounds in time and bytes, and
remove whatever they create on every path out."""
