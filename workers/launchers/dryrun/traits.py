"""The dry-run backend as the API and the domain core see it (plain data)."""

from shared.task.backend_traits import BackendTraits

# It runs nothing, so it refuses nothing a real backend would give: GPUs included.
TRAITS = BackendTraits(name="dryrun", gpus=True)
