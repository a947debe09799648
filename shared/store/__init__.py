"""Task records in Redis: the store, its Lua scripts, legacy records, the log tail, insights."""
