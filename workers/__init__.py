"""The Celery side of taskenv: one queue and one thin task per stage."""
