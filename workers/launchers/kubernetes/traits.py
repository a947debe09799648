"""The Kubernetes backend as the API and the domain core see it (plain data)."""

from shared.task.backend_traits import BackendTraits

# Replica 0 is pod 0 of the task's indexed Job, named through its headless Service;
# GPUs are the container's ``nvidia.com/gpu`` limit.
TRAITS = BackendTraits(name="kubernetes", replica_zero="{job}-0.{job}", gpus=True)
