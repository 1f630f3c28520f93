"""AMD GPUs (Instinct and Radeon) as the amdgpu kernel driver shows them in sysfs.

The driver's sysfs interface is the ground truth the kernel documents
(Documentation/gpu/amdgpu/): identity, VRAM, busy percent, the PCIe link, RAS error counts
and retired VRAM pages, the XGMI hive. Everything is read through HostFS, so a snapshot's
rootfs records and replays an AMD node like every other file. AMD's SMI library may add
facts where a node has it (`smi`); nothing here needs it.
"""
