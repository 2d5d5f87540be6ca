"""Pure decisions: plain functions over plain dataclasses, no I/O and no clock of their own.
The service, the tests and the simulators call the same functions; the import-linter
contracts in pyproject.toml keep database, Redis, Celery, S3, Kubernetes and HTTP clients out."""
