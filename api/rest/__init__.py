"""The JSON API under /api/v1: one module per resource."""
