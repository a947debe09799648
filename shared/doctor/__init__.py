"""The env doctor: a catalog of documented variables, advice on an env, and a pre-flight
read of the task's scripts (see docs/doctor.md)."""
