"""The job manifest: FfDL's `manifest.yml` as is, plus dlaas's own blocks.

FfDL fields (name, description, version, learners, gpus, cpus, memory, data_stores, framework,
evaluation_metrics, and anything else FfDL accepted) are read leniently: unknown keys are kept.
dlaas's blocks (checkpoint, restart_policy, parameter_server, elastic, performance,
environment) are strict. A top-level key that is neither FfDL's nor dlaas's is kept too, but
named in a warning (`unknown_field_warnings`): it is most often a typo of a field that then
silently keeps its default.

`parse_manifest` is the one entry point for untrusted text: it never lets a YAML or pydantic
exception escape; every refusal is an `Invalid` naming the field and the fix.
"""

from __future__ import annotations

import datetime as dt
import difflib
import math
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from api.bounded_yaml import DocumentRefused, ValueRefused, YamlLimits, load_bounded_yaml
from api.errors import Invalid
from storage.job_plan import elastic_batch
from storage.memory_sizes import parse_memory
from storage.memory_sizes import shown as _show
from storage.metric_regexes import metric_regexes as stored_metric_regexes
from storage.training_data import CONTAINER_NAME, CONTAINER_RULE

MAX_MANIFEST_BYTES = 64 * 1024
MAX_LEARNERS = 64
MAX_NODES = 5_000
MAX_DEPTH = 24
MAX_NUMBER_CHARS = 100
MAX_REGEX_CHARS = 2_000
# a job's priority, bounded further by its team's max_priority (`api.services.priority`)
MIN_PRIORITY = -1000
MAX_PRIORITY = 1000
MAX_RUNTIME_S = 366 * 86_400
# the largest whole number every reader of a manifest holds (SQL, JSON, Kubernetes quantities)
MAX_WHOLE_NUMBER = 2**63 - 1
YAML_LIMITS = YamlLimits(
    max_values=MAX_NODES, max_depth=MAX_DEPTH, max_number_chars=MAX_NUMBER_CHARS
)

RESERVED_ENV = frozenset(
    {
        "DATA_DIR",
        "MODEL_DIR",
        "RESULT_DIR",
        "LOG_DIR",
        "CHECKPOINT_DIR",
        "JOB_STATE_DIR",
        "TRAINING_ID",
        "LEARNER_ID",
        "NUM_LEARNERS",
        "GPU_COUNT",
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
        "PYTHONUNBUFFERED",
    }
)
RESERVED_ENV_PREFIX = "DLAAS_"

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_SECRET_KEY = re.compile(r"pass(word|wd)?|secret|token|api_?key|private_?key|credential", re.I)


# --- durations ----------------------------------------------------------------------------

_DURATION_RE = re.compile(r"\s*([0-9]+)\s*([smhd]?)\s*\Z", re.IGNORECASE)
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400}
DURATION_FORMS = "whole seconds (5400) or a number with a unit: 90m, 2h, 1d (s, m, h or d)"


def parse_duration(value: object) -> int:
    """'90m' -> 5400, '2h' -> 7200, 3600 -> 3600. ValueError on anything else; the result
    lies between 1 second and MAX_RUNTIME_S (366 days)."""
    seconds: int
    if isinstance(value, bool):
        raise ValueError(f"must be {DURATION_FORMS}")
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        seconds = int(value)
    elif isinstance(value, str):
        match = _DURATION_RE.match(value)
        if match is None:
            raise ValueError(f"{_show(value)} is not understood; use {DURATION_FORMS}")
        seconds = int(match.group(1)) * _DURATION_UNITS[match.group(2).lower()]
    else:
        raise ValueError(f"must be {DURATION_FORMS}")
    if seconds <= 0:
        raise ValueError(f"must be more than 0 seconds; use {DURATION_FORMS}")
    if seconds > MAX_RUNTIME_S:
        raise ValueError(f"{_show(value)} is above the limit of 366 days; ask for at most 366d")
    return seconds


# --- small field types --------------------------------------------------------------------


def _scalar_to_str(value: object) -> object:
    """YAML reads `version: 1.0` as a float and `version: 2018-01-02` as a date: keep text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


def _printable(value: str) -> str:
    if not value.isprintable():
        raise ValueError("must be printable text on one line (no tabs, newlines or control codes)")
    return value


def _strip(value: object) -> object:
    return value.strip() if isinstance(value, str) else value


Text = Annotated[str, BeforeValidator(_scalar_to_str)]
# text whose surrounding whitespace means nothing (YAML's folded `>` adds a final newline)
Trimmed = Annotated[str, BeforeValidator(_scalar_to_str), BeforeValidator(_strip)]
Name = Annotated[
    str,
    BeforeValidator(_scalar_to_str),
    BeforeValidator(_strip),
    Field(min_length=1, max_length=100),
    AfterValidator(_printable),
]
Memory = Annotated[int, BeforeValidator(parse_memory)]
Duration = Annotated[int, BeforeValidator(parse_duration)]


class _Lenient(BaseModel):
    """FfDL blocks: unknown keys are kept as they are."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, allow_inf_nan=False)


class _Strict(BaseModel):
    """dlaas blocks: unknown keys are refused (a typo should not be silently ignored)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


# --- FfDL blocks --------------------------------------------------------------------------


def _container_name(name: str) -> str:
    if not CONTAINER_NAME.fullmatch(name):
        raise PydanticCustomError(
            "container",
            "'{name}' is not a data container's name: use {rule}",
            {"name": name[:80], "rule": CONTAINER_RULE},
        )
    return name


class StorageContainer(_Lenient):
    container: Annotated[Text, AfterValidator(_container_name)]


class DataStore(_Lenient):
    id: Annotated[Text, Field(min_length=1, max_length=100)]
    type: Annotated[Text, Field(min_length=1, max_length=100)] = "mount_cos"
    training_data: StorageContainer
    training_results: StorageContainer | None = None
    connection: dict[str, Text] | None = None


class Framework(_Lenient):
    name: Text | None = None
    version: Text | None = None
    image_tag: Text | None = None
    command: Annotated[Trimmed, Field(min_length=1, max_length=16_384)]


def _compile(regex: str) -> re.Pattern[str]:
    if len(regex) > MAX_REGEX_CHARS:
        raise PydanticCustomError(
            "regex", "regex is longer than {limit} characters", {"limit": MAX_REGEX_CHARS}
        )
    try:
        return re.compile(regex)
    except re.error as exc:
        raise PydanticCustomError(
            "regex",
            "regex does not compile: {problem}; write a Python regular expression, "
            "e.g. 'loss=(?P<loss>[0-9.eE+-]+)'",
            {"problem": str(exc)},
        ) from None


def _native_regex(regex: str) -> str:
    if not _compile(regex).groupindex:
        raise PydanticCustomError(
            "regex",
            "regex names no group, so it yields no metric; name each value it captures, "
            "e.g. 'loss=(?P<loss>[0-9.eE+-]+)'",
        )
    return regex


def _one_or_many(value: object) -> object:
    return [value] if isinstance(value, str) else value


NativeRegex = Annotated[str, AfterValidator(_native_regex)]


class MetricGroup(_Lenient):
    """FfDL's regex extractor group: `regex` plus `meta`, `scalars`, `etimes` kept as given."""

    regex: str | None = None

    @field_validator("regex")
    @classmethod
    def _regex_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            _compile(value)
        return value


class EvaluationMetrics(_Lenient):
    type: Text | None = None
    in_: Text | None = Field(default=None, alias="in")
    image_tag: Text | None = None
    line_lookahead: Annotated[int, Field(ge=0, le=1000)] | None = None
    groups: dict[str, MetricGroup] | None = None
    groupDicts: dict[str, MetricGroup] | None = None  # FfDL's spelling
    regex: Annotated[list[NativeRegex], BeforeValidator(_one_or_many)] | None = None


# --- dlaas blocks -------------------------------------------------------------------------


class Checkpoint(_Strict):
    interval_s: Annotated[float, Field(gt=0, le=86_400)] = 30.0
    keep: Annotated[int, Field(ge=1, le=100)] = 2


ExitCode = Annotated[int, Field(ge=1, le=255)]


class RestartPolicy(_Strict):
    max_restarts: Annotated[int, Field(ge=0, le=100)] = 3
    backoff_s: Annotated[float, Field(ge=0, le=3_600)] = 1.0
    backoff_max_s: Annotated[float, Field(ge=0, le=86_400)] = 60.0
    # The same exit (code and last output line) this many times in a row, with no new
    # checkpoint between, is the program's own error: the job fails instead of restarting.
    identical_failures: Annotated[int, Field(ge=2, le=100)] = 2
    # A learner silent (no heartbeat) this long is hung: it is killed and restarted.
    heartbeat_timeout_s: Annotated[float, Field(ge=2, le=86_400)] = 30.0
    # What a failure restarts: every learner (gang: torch.distributed), or only the failed
    # one, each learner keeping checkpoints of its own (learner: independent learners).
    scope: Literal["gang", "learner"] = "gang"
    # Exit codes that fail the job at once instead of restarting (the program saying it
    # cannot go on, e.g. 2 for a bad argument).
    fail_on_exit_codes: Annotated[list[ExitCode], Field(max_length=255)] = Field(
        default_factory=list
    )

    @field_validator("fail_on_exit_codes")
    @classmethod
    def _distinct(cls, codes: list[int]) -> list[int]:
        return sorted(set(codes))

    @model_validator(mode="after")
    def _ordered(self) -> RestartPolicy:
        if self.backoff_max_s < self.backoff_s:
            raise PydanticCustomError(
                "restart_policy",
                "backoff_max_s ({max}) is below backoff_s ({min}); make backoff_max_s at least "
                "backoff_s",
                {"max": self.backoff_max_s, "min": self.backoff_s, "subpath": "backoff_max_s"},
            )
        return self


class ParameterServer(_Strict):
    mode: Literal["async", "sync", "bounded"] = "async"
    staleness: Annotated[int, Field(ge=0, le=10_000)] | None = None

    @model_validator(mode="after")
    def _staleness_for_bounded(self) -> ParameterServer:
        if self.mode == "bounded" and self.staleness is None:
            raise PydanticCustomError(
                "parameter_server",
                "mode bounded needs staleness: how many steps a learner may run ahead, "
                "e.g. staleness: 4",
                {"subpath": "staleness"},
            )
        if self.mode != "bounded" and self.staleness is not None:
            raise PydanticCustomError(
                "parameter_server",
                "staleness applies only to mode: bounded; remove it or set mode: bounded",
                {"subpath": "staleness"},
            )
        return self


MAX_BATCH_SIZE = 1 << 24


class Elastic(_Strict):
    """The sizes dlaas may run the job at: learners, and the global batch they share."""

    min_learners: Annotated[int, Field(ge=1, le=MAX_LEARNERS)] = 1
    max_learners: Annotated[int, Field(ge=1, le=MAX_LEARNERS)] | None = None
    # the global batch: dlaas picks one in this range for each learner count and tells the
    # learners in DLAAS_GLOBAL_BATCH_SIZE and DLAAS_BATCH_SIZE (each learner's share)
    min_batch_size: Annotated[int, Field(ge=1, le=MAX_BATCH_SIZE)] | None = None
    max_batch_size: Annotated[int, Field(ge=1, le=MAX_BATCH_SIZE)] | None = None
    # the most samples one learner holds in a step (its memory), if less than max_batch_size
    max_learner_batch_size: Annotated[int, Field(ge=1, le=MAX_BATCH_SIZE)] | None = None

    def batch_for(self, learners: int) -> int | None:
        """The global batch `learners` learners run at (`storage.job_plan.elastic_batch`)."""
        return elastic_batch(
            learners, self.min_batch_size, self.max_batch_size, self.max_learner_batch_size
        )

    @model_validator(mode="after")
    def _ordered(self) -> Elastic:
        if self.max_learners is not None and self.max_learners < self.min_learners:
            raise PydanticCustomError(
                "elastic",
                "max_learners ({max}) is below min_learners ({min}); make max_learners at least "
                "min_learners",
                {"max": self.max_learners, "min": self.min_learners, "subpath": "max_learners"},
            )
        low, high = self.min_batch_size, self.max_batch_size
        if (low is None) != (high is None):
            raise PydanticCustomError(
                "elastic",
                "give min_batch_size and max_batch_size together (the global batch's range), "
                "or neither",
                {"subpath": "max_batch_size" if high is None else "min_batch_size"},
            )
        if low is not None and high is not None and high < low:
            raise PydanticCustomError(
                "elastic",
                "max_batch_size ({max}) is below min_batch_size ({min}); make max_batch_size "
                "at least min_batch_size",
                {"max": high, "min": low, "subpath": "max_batch_size"},
            )
        if low is not None and low < self.min_learners:
            raise PydanticCustomError(
                "elastic",
                "min_batch_size ({low}) gives some of min_learners ({n}) no sample; make it at "
                "least min_learners",
                {"low": low, "n": self.min_learners, "subpath": "min_batch_size"},
            )
        if self.max_learner_batch_size is not None and low is None:
            raise PydanticCustomError(
                "elastic",
                "max_learner_batch_size needs the global batch's range: add min_batch_size and "
                "max_batch_size",
                {"subpath": "max_learner_batch_size"},
            )
        return self


class Performance(_Strict):
    """What one training step costs, for `dlaas plan` and the elastic autoscaler's first
    estimates (measured step times correct them once the job runs)."""

    # one learner's compute per sample: measured seconds, or floating-point operations that
    # a calibration's device speed turns into seconds (exactly one of the two)
    sample_seconds: Annotated[float, Field(gt=0, le=3_600, allow_inf_nan=False)] | None = None
    flops_per_sample: Annotated[float, Field(gt=0, le=1e18, allow_inf_nan=False)] | None = None
    # and per step, whatever the batch
    step_overhead_seconds: Annotated[float, Field(ge=0, le=86_400, allow_inf_nan=False)] = 0.0
    # bytes of gradients each learner exchanges a step (about the model's size)
    model_bytes: Annotated[int, Field(ge=0, le=MAX_WHOLE_NUMBER)] = 0
    # samples the whole training processes (epochs times the data set), for time to finish
    samples: Annotated[int, Field(ge=1, le=MAX_WHOLE_NUMBER)] | None = None
    # the global batch of a job without an elastic batch range
    batch_size: Annotated[int, Field(ge=1, le=MAX_BATCH_SIZE)] | None = None

    @model_validator(mode="after")
    def _one_compute_cost(self) -> Performance:
        if self.sample_seconds is None and self.flops_per_sample is None:
            raise PydanticCustomError(
                "performance",
                "missing; give sample_seconds (a learner's measured seconds of compute per "
                "sample, e.g. sample_seconds: 0.002) or flops_per_sample (its floating-point "
                "operations per sample, which a plan turns into seconds with a calibration's "
                "device speed)",
                {"subpath": "sample_seconds"},
            )
        if self.sample_seconds is not None and self.flops_per_sample is not None:
            raise PydanticCustomError(
                "performance",
                "give sample_seconds or flops_per_sample, not both: remove flops_per_sample "
                "to plan with the measured seconds, or sample_seconds to plan with a "
                "calibration's device speed",
                {"subpath": "flops_per_sample"},
            )
        return self


def _check_environment(env: dict[str, str]) -> dict[str, str]:
    if len(env) > 200:
        raise PydanticCustomError("environment", "more than 200 variables; keep it to 200")
    for name, value in env.items():
        if not _ENV_NAME.match(name):
            raise PydanticCustomError(
                "environment",
                "{name} is not a variable name; use letters, digits and _, not starting with "
                "a digit",
                {"name": _show(name), "subpath": name},
            )
        if name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIX):
            raise PydanticCustomError(
                "environment",
                "{name} is set by dlaas for every learner and cannot be overridden; remove it "
                "(or rename it) and read dlaas's value in your program",
                {"name": name, "subpath": name},
            )
        if len(value) > 16_384 or "\x00" in value:
            raise PydanticCustomError(
                "environment",
                "value of {name} is too long or holds a NUL byte; keep it under 16 KiB of text",
                {"name": name, "subpath": name},
            )
    return env


# --- the manifest -------------------------------------------------------------------------


class Manifest(_Lenient):
    name: Name = "job"
    description: Annotated[Text, Field(max_length=10_000)] | None = None
    version: Annotated[Text, Field(max_length=100)] | None = None
    learners: Annotated[int, Field(ge=1, le=MAX_LEARNERS)] = 1
    gpus: Annotated[int, Field(ge=0, le=64)] = 0
    cpus: Annotated[float, Field(gt=0, le=1024)] = 1.0
    memory: Memory = 1000**3
    storage: Memory | None = None
    data_stores: list[DataStore] | None = None
    framework: Framework
    evaluation_metrics: EvaluationMetrics | None = None

    # Higher starts first among the team's jobs; up to the team's max_priority.
    priority: Annotated[int, Field(ge=MIN_PRIORITY, le=MAX_PRIORITY, strict=True)] = 0
    # Estimated run time in seconds, which lets a short job start early in room held for a
    # bigger one; the job is not stopped at it.
    max_runtime: Duration | None = None
    checkpoint: Checkpoint = Field(default_factory=Checkpoint)
    restart_policy: RestartPolicy = Field(default_factory=RestartPolicy)
    parameter_server: ParameterServer | None = None
    elastic: Elastic | None = None
    performance: Performance | None = None
    environment: Annotated[dict[str, Text], AfterValidator(_check_environment)] = Field(
        default_factory=dict
    )

    @model_validator(mode="after")
    def _learners_within_elastic(self) -> Manifest:
        el = self.elastic
        if el is not None:
            high = el.max_learners if el.max_learners is not None else MAX_LEARNERS
            if not el.min_learners <= self.learners <= high:
                raise PydanticCustomError(
                    "elastic",
                    "learners ({n}) must lie between elastic.min_learners ({min}) and "
                    "elastic.max_learners ({max}); change learners or the elastic bounds",
                    {
                        "n": self.learners,
                        "min": el.min_learners,
                        "max": high,
                        "subpath": "learners",
                    },
                )
            if el.min_batch_size is not None and el.batch_for(self.learners) is None:
                raise PydanticCustomError(
                    "elastic",
                    "no global batch in min_batch_size..max_batch_size gives each of the "
                    "{n} learners between 1 and max_learner_batch_size samples; widen the "
                    "range or change learners",
                    {"n": self.learners, "subpath": "learners"},
                )
            perf = self.performance
            if el.min_batch_size is not None and perf is not None and perf.batch_size is not None:
                raise PydanticCustomError(
                    "elastic",
                    "performance.batch_size is for jobs without a batch range: the elastic "
                    "range decides the batch; remove performance.batch_size",
                    {"subpath": "performance.batch_size"},
                )
        return self

    @model_validator(mode="after")
    def _learner_scope_needs_independent_learners(self) -> Manifest:
        # Learners sharing a parameter server are one model: a learner restarted alone
        # would bring back its pod's sidecar from a snapshot older than its peers' weights.
        if self.restart_policy.scope == "learner" and self.parameter_server is not None:
            raise PydanticCustomError(
                "restart_policy",
                "scope learner restarts one learner alone, but learners sharing a "
                "parameter_server are not independent; use scope: gang or remove the "
                "parameter_server block",
                {"subpath": "restart_policy.scope"},
            )
        return self

    def normalized(self) -> dict[str, Any]:
        """Everything needed to run the job (credentials included), as JSON-ready data.

        `Manifest.model_validate(m.normalized())` gives back an equal manifest.
        """
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def public_dict(self) -> dict[str, Any]:
        """The normalized form with every password, secret, token or key removed."""
        redacted = _redact(self.normalized())
        assert isinstance(redacted, dict)
        return redacted


def _redact(value: object) -> object:
    if isinstance(value, dict):
        return {
            k: _redact(v)
            for k, v in value.items()
            if not (isinstance(k, str) and _SECRET_KEY.search(k))
        }
    if isinstance(value, list):
        return [_redact(v) for v in value]
    return value


# --- metric patterns ----------------------------------------------------------------------


def metric_regexes(manifest: Manifest | Mapping[str, Any]) -> list[str]:
    """Regex strings that pull metrics out of log lines (see `storage.metric_regexes`).

    Accepts a `Manifest` or its `normalized()` dict.
    """
    if isinstance(manifest, Manifest):
        em = manifest.evaluation_metrics
        dumped = em.model_dump(by_alias=True, exclude_none=True) if em is not None else None
        return stored_metric_regexes({"evaluation_metrics": dumped})
    return stored_metric_regexes(manifest)


def metric_patterns(manifest: Manifest | Mapping[str, Any]) -> list[re.Pattern[str]]:
    """`metric_regexes` compiled; a named group's match is the metric of that name."""
    return [re.compile(r) for r in metric_regexes(manifest)]


# --- parsing untrusted text ---------------------------------------------------------------

_FIXES: dict[str, str] = {
    "framework": (
        "add a framework block, e.g. framework: {name: pytorch, command: python train.py}"
    ),
    "framework.command": (
        "add framework.command: the shell command that starts training, e.g. python train.py"
    ),
    "learners": f"use a whole number from 1 to {MAX_LEARNERS}",
    "gpus": "use a whole number of GPUs per learner, 0 or more, up to 64",
    "cpus": "use a number of CPUs per learner above 0 and up to 1024, e.g. 0.5 or 2",
    "name": "use up to 100 printable characters on one line",
    "priority": (
        f"use a whole number from {MIN_PRIORITY} to {MAX_PRIORITY} (higher starts first); "
        "your team's max_priority bounds it (`dlaas team quota TEAM`)"
    ),
    "data_stores": (
        "give a list of stores, each with id, type, training_data: {container: ...} and "
        "training_results: {container: ...}"
    ),
    "environment": "give a mapping of NAME: value",
    "checkpoint": "allowed keys: interval_s (seconds, > 0) and keep (how many to keep, >= 1)",
    "restart_policy.scope": (
        "use gang (a failure restarts every learner) or learner (only the failed one)"
    ),
    "restart_policy.fail_on_exit_codes": "give a list of exit codes from 1 to 255, e.g. [2]",
    "restart_policy": (
        "allowed keys: max_restarts, backoff_s, backoff_max_s, identical_failures, "
        "heartbeat_timeout_s, scope (gang or learner) and fail_on_exit_codes"
    ),
    "parameter_server": "allowed keys: mode (async, sync or bounded) and staleness",
    "elastic": (
        "allowed keys: min_learners, max_learners, min_batch_size, max_batch_size and "
        "max_learner_batch_size"
    ),
    "performance": (
        "allowed keys: sample_seconds or flops_per_sample, step_overhead_seconds, "
        "model_bytes, samples and batch_size"
    ),
}


_OWN_KINDS = frozenset(
    {"regex", "environment", "restart_policy", "parameter_server", "elastic", "performance"}
)


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "manifest"


def _fix_for(path: str) -> str | None:
    while path:
        if path in _FIXES:
            return _FIXES[path]
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""
    return None


def _message(err: Mapping[str, Any]) -> tuple[str, str]:
    loc = tuple(err["loc"])
    ctx = err.get("ctx") or {}
    if isinstance(ctx.get("subpath"), str):
        loc = (*loc, ctx["subpath"])
    path = _path(loc)
    kind = err["type"]
    msg: str = err["msg"]
    if kind in _OWN_KINDS or kind == "value_error":
        # dlaas's own messages already say what to do
        return path, f"{path}: {msg.removeprefix('Value error, ')}"
    if kind == "missing":
        text = "missing"
    elif kind == "extra_forbidden":
        text = "is not a known field"
    elif kind in ("too_short", "string_too_short") and ctx.get("min_length") == 1:
        text = "is empty"
    elif kind in ("too_long", "string_too_long") and "max_length" in ctx:
        text = f"is longer than {ctx['max_length']} characters"
    else:
        text = msg[:1].lower() + msg[1:] if msg[1:2].islower() else msg
    fix = _fix_for(path)
    return path, f"{path}: {text}; {fix}" if fix else f"{path}: {text}"


def _invalid_from(exc: ValidationError) -> Invalid:
    errors = exc.errors(include_url=False, include_input=False)
    lines = [_message(e) for e in errors[:10]]
    field = lines[0][0] if lines else "manifest"
    more = f" (and {len(errors) - 10} more)" if len(errors) > 10 else ""
    detail = "invalid manifest: " + "; ".join(text for _, text in lines) + more
    return Invalid(detail, code="invalid_manifest", field=field)


def _refuse(detail: str, field: str = "manifest") -> Invalid:
    return Invalid(detail, code="invalid_manifest", field=field)


_LEAVES = (str, int, float, bool, type(None), dt.date)


def _refuse_value(path: str, problem: str) -> Invalid:
    # only a fix written for this very field: a block's fix lists its keys, not their ranges
    fix = _FIXES.get(path, "write a smaller number, or quote it if it is text")
    return _refuse(f"invalid manifest: {path}: {problem}; {fix}", path)


def _check_number(value: float, path: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise _refuse_value(path, f"{value} is not a finite number")
    if isinstance(value, int) and abs(value) > MAX_WHOLE_NUMBER:
        raise _refuse_value(
            path, f"{_show(value)} is beyond the largest number a manifest holds (2**63 - 1)"
        )


def _check_values(data: object) -> None:
    """Refuse what no field can use: keys that are not text, odd types, endless numbers.

    The document's size and depth are already bounded (`load_bounded_yaml`).
    """
    stack: list[tuple[object, str]] = [(data, "")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    where = path or "the top level"
                    raise _refuse(
                        f"{path or 'manifest'}: key {_show(key)} at {where} is not text; quote "
                        "it (YAML reads yes/no/on/off, numbers and dates as non-text)",
                        path or "manifest",
                    )
                stack.append((item, f"{path}.{key}" if path else key))
        elif isinstance(value, list):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(value))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            _check_number(value, path or "manifest")
        elif not isinstance(value, _LEAVES):
            raise _refuse(
                f"{path or 'manifest'}: holds a YAML value of type {type(value).__name__}, which "
                "a manifest cannot use; write plain text, numbers, lists and mappings",
                path or "manifest",
            )


# The top-level fields of FfDL's manifest (its ManifestV1): `gpu_type` is read by FfDL, not by
# dlaas, and kept as given.
FFDL_FIELDS = frozenset(
    {
        "name",
        "description",
        "version",
        "cpus",
        "gpus",
        "gpu_type",
        "learners",
        "memory",
        "storage",
        "data_stores",
        "framework",
        "evaluation_metrics",
    }
)


def manifest_fields() -> frozenset[str]:
    """Every top-level key FfDL or dlaas reads."""
    dlaas = {info.alias or name for name, info in Manifest.model_fields.items()}
    return FFDL_FIELDS | dlaas


def _unknown_fields(manifest: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """Each top-level key neither FfDL nor dlaas reads, with the field it most likely meant."""
    known = sorted(manifest_fields())
    found = []
    for key in manifest:
        if key in known:
            continue
        name = str(key)
        close = difflib.get_close_matches(name, known, n=1)
        found.append((name, close[0] if close else None))
    return found


def _shown_key(name: str) -> str:
    return name if name.isprintable() and len(name) <= 80 else _show(name, 80)


def unknown_field_warnings(manifest: Mapping[str, Any]) -> list[str]:
    """A warning for each top-level key neither FfDL nor dlaas reads and that is no near
    miss of a field (those are refused): it is kept, and FfDL's manifests pass as they are."""
    return [
        f"{_shown_key(name)} is not a manifest field: it is kept, but nothing reads it"
        for name, meant in _unknown_fields(manifest)
        if meant is None
    ]


def _refuse_near_misses(manifest: Mapping[str, Any]) -> None:
    """A top-level key one typo away from a field (`gpu: 4`, `cpuz: 0.5`) would run the job
    with that field's default; FfDL's manifests have none such."""
    for name, meant in _unknown_fields(manifest):
        if meant is not None:
            raise _refuse(
                f"invalid manifest: {_shown_key(name)} is not a manifest field: did you mean "
                f"{meant}?",
                _shown_key(name),
            )


def parse_manifest(text: bytes | str) -> Manifest:
    """Validate an uploaded manifest. Raises `Invalid` (code `invalid_manifest`) only."""
    size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_MANIFEST_BYTES:
        raise _refuse(
            f"manifest: is {size} bytes, above the {MAX_MANIFEST_BYTES // 1024} KiB limit; "
            "keep the manifest small and put data in the model archive or a data store"
        )
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise _refuse(
                f"manifest is not UTF-8 text (bad byte at offset {exc.start}); save it as UTF-8"
            ) from None
    try:
        data = load_bounded_yaml(text, YAML_LIMITS)
    except DocumentRefused as refusal:
        raise _refuse(f"manifest: {refusal.problem}") from None
    except ValueRefused as refusal:
        path = refusal.path or "manifest"
        raise _refuse(f"invalid manifest: {path}: {refusal.problem}", path) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        problem = exc.problem or exc.context or "syntax error"
        raise _refuse(
            f"manifest is not valid YAML: {where}{problem}; fix the YAML syntax"
        ) from None
    except (yaml.YAMLError, RecursionError, ValueError, OverflowError) as exc:
        raise _refuse(
            f"manifest is not valid YAML: {_show(str(exc), 200)}; fix the YAML syntax"
        ) from None
    if data is None:
        raise _refuse("manifest is empty; give at least framework: {command: python train.py}")
    if not isinstance(data, dict):
        raise _refuse(
            f"manifest must be a YAML mapping of fields (name:, framework:, ...), not a "
            f"{_yaml_kind(data)}; start each top-level field at column 1 as `key: value`"
        )
    _check_values(data)
    _refuse_near_misses(data)
    try:
        return Manifest.model_validate(data)
    except ValidationError as exc:
        raise _invalid_from(exc) from None


def _yaml_kind(value: object) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "plain string"
    if isinstance(value, bool):
        return "true/false value"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__
