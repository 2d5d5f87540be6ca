"""Names of the lifecycle manager's Celery tasks: the contract the API nudges it through.

The API sends these by name (`celery.send_task(DEPLOY_JOB, args=[job_id])`), so it never
imports the lifecycle manager. Every task is idempotent and keyed by its job id.
"""

from __future__ import annotations

DEPLOY_JOB = "dlaas.deploy_job"  # args: [job_id]
HALT_JOB = "dlaas.halt_job"  # args: [job_id]
RESUME_JOB = "dlaas.resume_job"  # args: [job_id]
DELETE_JOB = "dlaas.delete_job"  # args: [job_id]
RECONCILE = "dlaas.reconcile"  # no args; also run every few seconds by the beat schedule
RECOVER_JOB = "dlaas.recover_job"  # args: [job_id]; deploys a RECOVERING job's next attempt
COLLECT_GARBAGE = "dlaas.collect_garbage"  # no args; run by the beat schedule
SCHEDULE = "dlaas.schedule"  # no args; a scheduling pass (also in every reconcile)
