"""Every resource the cluster view reads, and where: the auditor's ClusterRole
(daemonset/auditor/clusterrole.yaml) grants `list` on exactly these (and `get` on the
cluster-autoscaler's status ConfigMap), and a test holds the two equal.

Custom resources are read at the version named here when the API server serves it
(discovery); a group that is not served is a fact ("not installed"), not an error.
"""

from __future__ import annotations

from gpuprobe.kube.reader import Kind

NODES = Kind("", "v1", "nodes", "Node", namespaced=False)
PODS = Kind("", "v1", "pods", "Pod", namespaced=True)
EVENTS = Kind("", "v1", "events", "Event", namespaced=True)
CLAIMS = Kind("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", namespaced=True)
CONFIG_MAPS = Kind("", "v1", "configmaps", "ConfigMap", namespaced=True)
DAEMON_SETS = Kind("apps", "v1", "daemonsets", "DaemonSet", namespaced=True)
STORAGE_CLASSES = Kind("storage.k8s.io", "v1", "storageclasses", "StorageClass", False)
CSI_DRIVERS = Kind("storage.k8s.io", "v1", "csidrivers", "CSIDriver", namespaced=False)
# DRA: resource.k8s.io serves v1 from Kubernetes 1.34, v1beta2 from 1.33, v1beta1 from 1.32;
# a ResourceSlice's spec.driver, spec.nodeName and spec.devices read the same in all three.
RESOURCE_SLICE_VERSIONS = ("v1", "v1beta2", "v1beta1")
RESOURCE_SLICES = Kind("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False)
# DeviceTaintRules: v1 from 1.37, v1beta2 in 1.36 (the DRADeviceTaintRules gate).
DEVICE_TAINT_RULE_VERSIONS = ("v1", "v1beta2")
DEVICE_TAINT_RULES = Kind("resource.k8s.io", "v1", "devicetaintrules", "DeviceTaintRule", False)
CLUSTER_POLICIES = Kind("nvidia.com", "v1", "clusterpolicies", "ClusterPolicy", False)
NIC_CLUSTER_POLICIES = Kind(
    "mellanox.com", "v1alpha1", "nicclusterpolicies", "NicClusterPolicy", namespaced=False
)
VOLCANO_POD_GROUPS = Kind("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", True)
COSCHEDULING_POD_GROUPS = Kind("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup", True)
JOB_SETS = Kind("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", namespaced=True)
PYTORCH_JOBS = Kind("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob", namespaced=True)
MPI_JOBS = Kind("kubeflow.org", "v2beta1", "mpijobs", "MPIJob", namespaced=True)
NODE_POOLS = Kind("karpenter.sh", "v1", "nodepools", "NodePool", namespaced=False)

# Everything the view lists (the ClusterRole's `list` rules).
LISTED = (
    NODES,
    PODS,
    EVENTS,
    CLAIMS,
    DAEMON_SETS,
    STORAGE_CLASSES,
    CSI_DRIVERS,
    RESOURCE_SLICES,
    DEVICE_TAINT_RULES,
    CLUSTER_POLICIES,
    NIC_CLUSTER_POLICIES,
    VOLCANO_POD_GROUPS,
    COSCHEDULING_POD_GROUPS,
    JOB_SETS,
    PYTORCH_JOBS,
    MPI_JOBS,
    NODE_POOLS,
)
# The one object the view gets by name: the cluster-autoscaler's status (kube-system).
AUTOSCALER_STATUS = ("kube-system", "cluster-autoscaler-status")

# Groups whose presence alone is the fact (discovery; no object is read).
GANG_SCHEDULERS = {
    "scheduling.volcano.sh": "Volcano",
    "kueue.x-k8s.io": "Kueue",
    "scheduling.x-k8s.io": "scheduler-plugins coscheduling",
    "scheduling.run.ai": "KAI scheduler",
}
TRAINING_OPERATORS = {
    "trainer.kubeflow.org": "Kubeflow Trainer",
    "kubeflow.org": "Kubeflow training-operator / MPI operator",
    "jobset.x-k8s.io": "JobSet",
    "leaderworkerset.x-k8s.io": "LeaderWorkerSet",
    "ray.io": "KubeRay",
}
