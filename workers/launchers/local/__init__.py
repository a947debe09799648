"""The local backend: each step in a bubblewrap sandbox on the worker's own machine.

``launcher`` (the Launcher), ``runner`` (the detached process that runs one task),
``group`` (several replicas under one runner), ``netns`` (the task's own network) and
``slots`` (the host's run slots, shared by every worker of the host).
"""
