"""The admins' policies: model and merge, rules, conditions, layers, impact, their store."""
