"""The lifecycle manager's processes: the Celery app and its worker, the beat's scheduler, the
monitor, and the wiring that opens a process's `Context` from its settings. Nothing else in
the lifecycle manager imports these (the import-linter contracts in pyproject.toml)."""
