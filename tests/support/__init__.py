"""Helpers the tests share: a real stack, podman, hostile values."""
