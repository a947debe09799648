"""The Slurm backend as the API and the domain core see it (plain data)."""

from shared.task.backend_traits import BackendTraits

# srun and sbatch read SLURM_*/SRUN_* as their own options.  A distributed job learns
# replica 0's address (its first node) and port (the one its step reserves) only once it
# has its nodes: the node fills both in.  GPUs are ``--gres=gpu:N``.
TRAITS = BackendTraits(name="slurm", reserved_prefixes=("SLURM_", "SRUN_"),
                       replica_zero="<the job's first node>",
                       master_port_shown="<the port the job's step reserves>", gpus=True)
