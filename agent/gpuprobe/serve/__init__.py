"""The agent daemon (`gpuprobe serve`): scheduler, gRPC service, Prometheus metrics.

The package itself imports nothing heavy: `gpuprobe.serve.convert` is shared with the
client library, and the servers are imported only by `gpuprobe serve`.
"""
