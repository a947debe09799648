"""Env lists and .env files: what a user submits, read as data; and the names the platform
sets per replica of a task (identity), which no user or policy may set."""
