"""What several backends share, written once: the bubblewrap sandbox and its
containment (local and Slurm), and the lifecycle of a group of replicas."""
