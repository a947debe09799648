"""``taskenv``: the command-line client of the taskenv HTTP API."""
