import dagster as dg

# One partition per evaluated session; a key is a session id and is never reused.
SESSIONS = "sessions"
sessions_partitions = dg.DynamicPartitionsDefinition(name=SESSIONS)
