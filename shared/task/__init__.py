"""One task: its states, record, resolution, revisions, workload and manifest (pure)."""
