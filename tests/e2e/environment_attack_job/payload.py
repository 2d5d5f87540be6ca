"""Planted as sitecustomize.py and usercustomize.py: leaves a marker where a process of the
platform (root, or one holding a platform secret) imports it. Standard library only."""

import os
import sys

SECRETS = ("DLAAS_REDIS_URL", "DLAAS_AGENT_TOKEN", "DLAAS_JOB_TOKEN", "DLAAS_ADMIN_TOKEN")


def _place(where: str) -> str:
    planted = (("/tmp/dlaas-plant/", "tmp"), ("/var/tmp/dlaas-plant/", "var-tmp"))
    for prefix, place in (*planted, ("/dev/shm/dlaas-plant/", "shm")):
        if where.startswith(prefix):
            return place
    return "archive"


def _mark() -> None:
    held = [name for name in SECRETS if name in os.environ]
    if os.geteuid() != 0 and not held:
        return
    where = os.path.dirname(os.path.abspath(__file__))
    label = os.path.basename(__file__).split(".")[0] + "-" + _place(where + "/")
    try:
        with open(os.path.join("@MARKERS@", f"{label}-{os.getpid()}"), "w") as out:
            out.write(f"uid {os.geteuid()} in {where}: {sys.argv} holding {held}")
    except OSError:
        pass


_mark()
