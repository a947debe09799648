"""The Slurm backend: one ``sbatch`` per revision.

``launcher`` (the Launcher), ``submit`` (what is submitted and what Slurm's answers
mean, pure), ``job`` (the program the job runs on the cluster's nodes).
"""
