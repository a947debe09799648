"""The podman backend: a pod per revision, from the same Pod spec Kubernetes gets."""
