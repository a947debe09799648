"""The Slurm backend as the API and the domain core see it (plain data)."""

from shared.task.backend_traits import BackendTraits

# srun and sbatch read SLURM_*/SRUN_* as their own options.  A job's replicas all run on
# its one node (--nodes=1) and meet in the job's own network namespace there: replica 0
# listens on loopback at the identity's port, as on the local launcher.  GPUs are
# ``--gres=gpu:N``.
TRAITS = BackendTraits(name="slurm", reserved_prefixes=("SLURM_", "SRUN_"), gpus=True,
                       runtime_dirs=True)
