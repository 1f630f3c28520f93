"""What checks judge by that is no check of its own: shared judging knowledge and the
settings more than one check reads.

A check module (one whose record `gpuprobe.checks.registry` lists) imports no other check;
what two checks both need lives here (a vendor's rules live in its own folder,
`checks/nvidia/`, `checks/amd/`): the pods check's failure signatures (`pod_signatures`) and
listing bounds (`pods_bounds`), the sections one check owns and another reads (`sections`:
the gpus and workloads checks'; `xid_settings`: the xid check's, whose kernel-log sources the
pods check reads too) and how a check reads the kernel log as those settings say (`kernel_reading`).
`tests/checks/test_registry.py` holds that no check module imports another.
"""
