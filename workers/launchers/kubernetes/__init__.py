"""The Kubernetes backend: a Secret and a batch/v1 Job per revision.

``launcher`` (the Launcher), ``watch`` (the Job and pod informer), ``ratelimit`` (the
client-side token bucket every API call takes a token from).
"""
