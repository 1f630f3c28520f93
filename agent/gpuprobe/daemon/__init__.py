"""The daemon's orchestration (`gpuprobe serve`): the scheduler, the report store, the event
path and the pollers; `gpuprobe.serve` keeps the faces (gRPC, HTTP) and wires them to it."""
