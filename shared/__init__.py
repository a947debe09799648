"""The domain core of taskenv, shared by the API and the workers.

Nothing in here talks HTTP or Celery: env lists, their validation, the admin
policy and its merge, and the task records kept in Redis.
"""
