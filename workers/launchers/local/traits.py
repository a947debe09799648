"""The local backend as the API and the domain core see it (plain data)."""

from shared.task.backend_traits import BackendTraits

# Replicas share the worker's host and one network namespace: replica 0 is on loopback,
# and the whole task must fit the host and its run slots; a task's image is a runtime
# directory of the host's (TASKENV_RUNTIMES).  The sandbox passes no device
# of the host through, so a task asking for GPUs is refused rather than run without.
TRAITS = BackendTraits(name="local", one_host=True, runtime_dirs=True)
