"""Active measurements: bandwidth between agents, RDMA perftest, NCCL tests, storage."""
