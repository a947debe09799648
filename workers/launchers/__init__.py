"""Launchers put a resolved workload into a container (or a process).

Each backend is a folder of its own (``workers/launchers/<name>/``); ``registry`` names
them and makes the configured one; ``base`` is the contract; ``common/`` is what several
share.  This package imports nothing itself: a local runner, which starts its step before
any slow import, reaches its own modules through it.
"""
