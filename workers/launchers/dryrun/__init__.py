"""The dry-run backend: builds everything a launch needs and runs nothing."""
