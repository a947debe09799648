"""Who may do what, and how much: tokens, projects, quotas, audit."""
