"""Benchmarks: ``make bench`` runs ``python -m bench``; see docs/performance.md."""
