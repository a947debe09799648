"""The podman backend as the API and the domain core see it (plain data)."""

from shared.task.backend_traits import BackendTraits

# Replicas run as containers of one pod, which share its network: replica 0 on loopback.
# ``podman kube play`` ignores a Pod's GPU limits, so a task asking for GPUs is refused
# rather than run without.
TRAITS = BackendTraits(name="podman")
