"""The Slurm backend as the API and the domain core see it (plain data)."""

from shared.env.identity import SOCKET_IFNAME_NAMES
from shared.task.backend_traits import BackendTraits

# A job spread over several nodes (a task's ``nodes``) gets a network of its own: a VXLAN
# segment joining its namespaces on each node, node k at JOB_NET.(k+1)/24, replica 0's node
# first (job.py says how).  On one node the replicas meet on loopback, as on the local
# launcher.
JOB_NET = "10.254.0"
JOB_NET_MASTER = f"{JOB_NET}.1"

# srun and sbatch read SLURM_*/SRUN_* as their own options.  GPUs are ``--gres=gpu:N``.
TRAITS = BackendTraits(name="slurm", reserved_prefixes=("SLURM_", "SRUN_"), gpus=True,
                       runtime_dirs=True, nodes_master=JOB_NET_MASTER,
                       node_chosen=SOCKET_IFNAME_NAMES)
