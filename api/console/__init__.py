"""The web console: one blueprint, its forms, sessions, templates and static files."""
