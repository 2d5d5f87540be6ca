"""Where a user's training data lives in the object store, and which of a manifest's data
stores its learners fetch.

A user uploads data into named containers (`dlaas data upload CONTAINER PATH`); a manifest
names one in `data_stores[i].training_data.container`, and every learner of the job gets a
copy of that container's objects in its `DATA_DIR`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# A data container's name: what `dlaas data upload` takes and what a manifest may name.
CONTAINER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
CONTAINER_RULE = "1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"


def data_prefix(owner_id: int, container: str) -> str:
    """The objects of one of a user's data containers: `data/{owner}/{container}/`."""
    return f"data/{owner_id}/{container.strip('/')}/"


def training_data_store(manifest: Mapping[str, Any]) -> tuple[int, str] | None:
    """The index of the data store whose training data the learners fetch (the first that
    names a container) and that container; None when the manifest names none."""
    for index, store in enumerate(manifest.get("data_stores") or []):
        section = store.get("training_data") if isinstance(store, Mapping) else None
        container = section.get("container") if isinstance(section, Mapping) else None
        if container:
            return index, str(container)
    return None
