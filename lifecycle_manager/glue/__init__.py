"""What applies the decisions to the world: reads and writes the database, Redis and the
object store, and asks a cluster backend to create or delete learners. Each step is
idempotent and keyed by job id, so any worker may run it again after a crash."""
