"""FfDL's /v1 response shapes (ffdl_v1_definitions.json, transcribed from FfDL's
specification) as validators for the tests.

The specification marks no property required and allows any other, so as it stands it
would pass an answer with every name misspelled. `validator` checks more: no property the
specification does not define, and every one dlaas answers present (those it leaves out,
`NOT_ANSWERED`, stay optional).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

DEFINITIONS = json.loads((Path(__file__).with_name("ffdl_v1_definitions.json")).read_text())

# Properties of the specification dlaas does not answer: a training's pre-configured size
# (dlaas sizes a job by its manifest) and its notification endpoints (dlaas calls no URL).
NOT_ANSWERED = {"Training": {"size", "events"}}


def _strict(definitions: dict[str, Any]) -> dict[str, Any]:
    strict = copy.deepcopy(definitions)
    for name, schema in strict["$defs"].items():
        properties = schema.get("properties")
        if properties is None:
            continue
        schema["additionalProperties"] = False
        schema["required"] = sorted(set(properties) - NOT_ANSWERED.get(name, set()))
    return strict


_STRICT = _strict(DEFINITIONS)


def validator(definition: str) -> Draft202012Validator:
    schema = {**_STRICT, "$ref": f"#/$defs/{definition}"}
    return Draft202012Validator(schema)


def check(definition: str, value: Any) -> None:
    """Fail, naming every problem, unless `value` is a `definition` of FfDL's."""
    problems = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator(definition).iter_errors(value)
    ]
    assert not problems, f"not FfDL's {definition}: {problems}"
