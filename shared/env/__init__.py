"""Env lists and .env files: what a user submits, read as data."""
