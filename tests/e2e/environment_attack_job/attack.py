"""A training program whose manifest's `environment` points the platform's own processes at
code it brought (`PYTHONPATH`, `PYTHONUSERBASE`, `PATH`, `BASH_ENV`, `LD_PRELOAD`), in its
archive or planted by an earlier job in /tmp, /var/tmp and /dev/shm. The planted code leaves
a marker only when it runs as root or beside a platform secret (tests/e2e/environment_attacks.py
counts them); in the program itself it must run, since that environment is the program's.

    python attack.py plant    copy the payloads where a later job's environment points
    python attack.py report   print what the program itself loaded, as one JSON line

Standard library only.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

PLANTED = ("/tmp/dlaas-plant", "/var/tmp/dlaas-plant", "/dev/shm/dlaas-plant")
PAYLOADS = ("sitecustomize.py", "preload.so", "bin")


def plant() -> list[str]:
    here = Path.cwd()
    planted = []
    for directory in PLANTED:
        target = Path(directory)
        target.mkdir(mode=0o755, parents=True, exist_ok=True)
        target.chmod(0o755)
        for name in PAYLOADS:
            source = here / name
            if source.is_dir():
                shutil.copytree(source, target / name, dirs_exist_ok=True)
            elif source.exists():
                shutil.copy(source, target / name)
        for path in [target, *target.rglob("*")]:
            path.chmod(0o755)
        planted.append(str(target))
    return planted


def main() -> None:
    if sys.argv[1] == "plant":
        print(json.dumps({"environment_attack": {"planted": plant()}}), flush=True)
        return
    loaded = {
        name: getattr(sys.modules.get(name), "__file__", None)
        for name in ("sitecustomize", "usercustomize")
    }
    print(json.dumps({"environment_attack": {"uid": os.getuid(), "loaded": loaded}}), flush=True)


if __name__ == "__main__":
    main()
