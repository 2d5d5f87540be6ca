"""Manifest validation: FfDL manifests as they are, dlaas blocks, and every refusal."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import pytest

from api import bounded_yaml
from api.errors import Conflict, DlaasError, Invalid, NotFound, TooLarge, Unauthorized
from api.manifest import (
    MAX_DEPTH,
    MAX_MANIFEST_BYTES,
    MAX_NODES,
    RESERVED_ENV,
    Manifest,
    metric_patterns,
    metric_regexes,
    parse_manifest,
)
from storage.memory_sizes import MAX_MEMORY_BYTES, parse_memory

SAMPLES = sorted((Path(__file__).parents[2] / "examples" / "ffdl_manifests").glob("*.yml"))
MINIMAL = "framework:\n  command: python train.py\n"


def refuse(text: str | bytes) -> Invalid:
    with pytest.raises(Invalid) as info:
        parse_manifest(text)
    err = info.value
    assert err.status == 422
    assert err.code == "invalid_manifest"
    assert err.field
    return err


def with_minimal(extra: str) -> str:
    return MINIMAL + extra


def walk_keys(value: Any) -> set[str]:
    keys: set[str] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            keys.add(k)
            keys |= walk_keys(v)
    elif isinstance(value, list):
        for v in value:
            keys |= walk_keys(v)
    return keys


# --- errors -------------------------------------------------------------------------------


def test_error_classes_and_body() -> None:
    cases: list[tuple[DlaasError, int, str]] = [
        (Invalid("bad"), 422, "invalid"),
        (NotFound("gone"), 404, "not_found"),
        (Conflict("busy"), 409, "conflict"),
        (TooLarge("big"), 413, "too_large"),
        (Unauthorized("who"), 401, "unauthorized"),
    ]
    for err, status, code in cases:
        assert (err.status, err.code) == (status, code)
        assert err.to_body() == {"error": code, "detail": err.detail}
        assert isinstance(err, DlaasError)
    err = Invalid("learners: too many", code="invalid_manifest", field="learners")
    assert err.to_body() == {
        "error": "invalid_manifest",
        "detail": "learners: too many",
        "field": "learners",
    }
    assert Invalid("x", status=400).status == 400
    assert Invalid("y").status == 422


# --- FfDL manifests -----------------------------------------------------------------------


def test_there_are_ffdl_samples() -> None:
    assert 4 <= len(SAMPLES) <= 8


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_ffdl_sample_accepted(path: Path) -> None:
    raw = path.read_bytes()
    m = parse_manifest(raw)
    assert m.framework.command
    assert parse_manifest(raw.decode()) == m
    assert Manifest.model_validate(m.normalized()) == m
    public = m.public_dict()
    assert "password" not in walk_keys(public)
    assert "password" not in str(public)


def test_ffdl_tutorial_fields() -> None:
    m = parse_manifest((SAMPLES[0].parent / "tf-convolutional.yml").read_bytes())
    assert m.name == "tf_convolutional_network_tutorial"
    assert (m.learners, m.gpus, m.cpus, m.memory) == (1, 0, 0.5, 10**9)
    assert m.version == "1.0"
    assert m.framework.name == "tensorflow" and m.framework.version == "1.5.0-py3"
    assert m.framework.command.startswith("python3 convolutional_network.py")
    assert "${DATA_DIR}/t10k-labels-idx1-ubyte.gz" in m.framework.command
    assert not m.framework.command.endswith("\n")
    assert m.data_stores is not None
    store = m.data_stores[0]
    assert store.training_data.container == "tf_training_data"
    assert store.training_results is not None
    assert store.training_results.container == "tf_trained_model"
    assert store.connection == {
        "auth_url": "http://s3.default.svc.cluster.local",
        "user_name": "test",
        "password": "test",
    }
    assert m.evaluation_metrics is not None
    assert m.evaluation_metrics.type == "tensorboard"
    assert m.evaluation_metrics.in_ == "$JOB_STATE_DIR/logs/tb"
    assert m.normalized()["evaluation_metrics"] == {
        "type": "tensorboard",
        "in": "$JOB_STATE_DIR/logs/tb",
    }
    assert metric_patterns(m) == []


def test_unknown_ffdl_fields_are_kept() -> None:
    m = parse_manifest(
        with_minimal(
            "  image_tag: cpu\n  resources: {shm: 1Gi}\n"
            "model_definition: {name: x}\n"
            "data_stores:\n"
            "  - id: s\n    type: mount_cos\n    training_data: {container: d, prefix: p}\n"
            "    mount_options: [ro]\n"
        )
    )
    n = m.normalized()
    assert n["model_definition"] == {"name": "x"}
    assert n["framework"]["resources"] == {"shm": "1Gi"}
    assert n["framework"]["image_tag"] == "cpu"
    assert n["data_stores"][0]["training_data"] == {"container": "d", "prefix": "p"}
    assert n["data_stores"][0]["mount_options"] == ["ro"]
    assert "training_results" not in n["data_stores"][0]


def test_defaults() -> None:
    m = parse_manifest(MINIMAL)
    assert m.name == "job"
    assert (m.learners, m.gpus, m.cpus, m.memory) == (1, 0, 1.0, 10**9)
    assert (m.checkpoint.interval_s, m.checkpoint.keep) == (30.0, 2)
    rp = m.restart_policy
    assert (rp.max_restarts, rp.backoff_s, rp.backoff_max_s) == (3, 1.0, 60.0)
    assert m.parameter_server is None and m.elastic is None
    assert m.environment == {}
    assert m.data_stores is None and m.evaluation_metrics is None
    assert m.normalized() == {
        "name": "job",
        "learners": 1,
        "gpus": 0,
        "cpus": 1.0,
        "memory": 10**9,
        "framework": {"command": "python train.py"},
        "priority": 0,
        "checkpoint": {"interval_s": 30.0, "keep": 2},
        "restart_policy": {
            "max_restarts": 3,
            "backoff_s": 1.0,
            "backoff_max_s": 60.0,
            "identical_failures": 2,
            "heartbeat_timeout_s": 30.0,
            "scope": "gang",
            "fail_on_exit_codes": [],
        },
        "environment": {},
    }


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("3600", 3600), ("5400.0", 5400), ("'90m'", 5400), ("2h", 7200), ("1d", 86400), ("45s", 45)],
)
def test_max_runtime_is_kept_as_seconds(text: str, seconds: int) -> None:
    m = parse_manifest(f"max_runtime: {text}\n" + MINIMAL)
    assert m.max_runtime == seconds
    assert m.normalized()["max_runtime"] == seconds
    assert Manifest.model_validate(m.normalized()) == m


@pytest.mark.parametrize("text", ["0", "-5", "1.5", "90 minutes", "2w", "true", "[1]", "367d"])
def test_a_max_runtime_that_is_not_a_duration_is_refused_naming_it(text: str) -> None:
    with pytest.raises(Invalid) as refusal:
        parse_manifest(f"max_runtime: {text}\n" + MINIMAL)
    assert refusal.value.field == "max_runtime"
    assert "max_runtime" in refusal.value.detail


def test_priority_defaults_to_0_and_is_bounded() -> None:
    assert parse_manifest(MINIMAL).priority == 0
    assert parse_manifest("priority: -1000\n" + MINIMAL).priority == -1000
    assert parse_manifest("priority: 1000\n" + MINIMAL).priority == 1000
    for text in ("1001", "-1001", "1.5", "high"):
        with pytest.raises(Invalid) as refusal:
            parse_manifest(f"priority: {text}\n" + MINIMAL)
        assert refusal.value.field == "priority"
        assert "-1000 to 1000" in refusal.value.detail, refusal.value.detail


def test_scalars_read_as_numbers_stay_text() -> None:
    m = parse_manifest(
        "name: 2024\nversion: 1.0\nframework: {name: caffe, version: 1.5, command: run}\n"
    )
    assert (m.name, m.version, m.framework.version) == ("2024", "1.0", "1.5")
    assert parse_manifest("version: 2018-01-02\n" + MINIMAL).version == "2018-01-02"


# --- memory -------------------------------------------------------------------------------

GB = 1000**3
GIB = 1024**3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1Gb", GB),
        ("1GB", GB),
        ("1gb", GB),
        ("2G", 2 * GB),
        ("16Gb", 16 * GB),
        ("100MB", 100 * 1000**2),
        ("100Mb", 100 * 1000**2),
        ("300MiB", 300 * 1024**2),
        ("1000MiB", 1000 * 1024**2),
        ("512Mi", 512 * 1024**2),
        ("1.5GiB", int(1.5 * GIB)),
        ("1Gi", GIB),
        ("64KiB", 64 * 1024),
        ("10kb", 10_000),
        ("1TB", 1000**4),
        ("2Ti", 2 * 1024**4),
        ("0.5G", GB // 2),
        (" 4 GB ", 4 * GB),
        ("2048", 2048),
        ("2048B", 2048),
        (4096, 4096),
        (4096.0, 4096),
    ],
)
def test_memory_forms(text: str | int | float, expected: int) -> None:
    assert parse_memory(text) == expected
    assert parse_manifest(with_minimal(f"memory: {text!s}\n")).memory == expected


@pytest.mark.parametrize(
    "text", ["1Zb", "lots", "-1Gb", "0", "0Gi", "1 G B", "Gb", "1e9", "[1]", "true", "1.5"]
)
def test_memory_refused(text: str) -> None:
    err = refuse(with_minimal(f"memory: {text}\n"))
    assert err.field == "memory"
    assert "memory:" in err.detail
    assert "512Mi" in err.detail and "1Gb" in err.detail


def test_storage_uses_memory_forms() -> None:
    assert parse_manifest(with_minimal("storage: 10Gb\n")).storage == 10 * GB
    assert refuse(with_minimal("storage: 10 parsecs\n")).field == "storage"


def test_memory_up_to_one_pib_is_accepted() -> None:
    assert parse_memory("1024Ti") == MAX_MEMORY_BYTES == 1024**5
    assert parse_memory(MAX_MEMORY_BYTES) == MAX_MEMORY_BYTES


@pytest.mark.parametrize(
    "value", ["9" * 400 + "Gi", "1025Ti", "1000000TB", str(1024**5 + 1), "1.0e+300"]
)
def test_memory_above_one_pib_is_refused_naming_the_limit(value: str) -> None:
    err = refuse(with_minimal(f"memory: {value}\n"))
    assert err.field == "memory"
    assert "1 PiB" in err.detail and "1024Ti" in err.detail


# --- resources ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        ("learners: 0", "learners", "from 1 to 64"),
        ("learners: 65", "learners", "from 1 to 64"),
        ("learners: many", "learners", "whole number"),
        ("learners: 1.5", "learners", "whole number"),
        ("gpus: -1", "gpus", "0 or more"),
        ("cpus: 0", "cpus", "above 0"),
        ("cpus: -2", "cpus", "above 0"),
        ("cpus: .nan", "cpus", "above 0"),
        ("name: ''", "name", "printable"),
        ("name: " + "n" * 101, "name", "100"),
        ('name: "tab\\there"', "name", "printable"),
        ("data_stores: {id: x}", "data_stores", "list of stores"),
        ("data_stores: [{id: x, training_data: {}}]", "data_stores[0].training_data.container", ""),
    ],
)
def test_resource_refusals(extra: str, field: str, words: str) -> None:
    err = refuse(with_minimal(extra + "\n"))
    assert err.field == field
    assert err.detail.startswith(f"invalid manifest: {field}:")
    assert words in err.detail


def test_resources_accepted() -> None:
    m = parse_manifest(with_minimal("learners: 64\ngpus: 2\ncpus: 0.25\n"))
    assert (m.learners, m.gpus, m.cpus) == (64, 2, 0.25)


HUGE = "9" * 30  # a whole number no field can hold, short enough to be read as one


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        ("learners: " + HUGE, "learners", "2**63 - 1"),
        ("learners: .inf", "learners", "not a finite number"),
        ("learners: " + "9" * 101, "learners", "above the limit of 100"),
        ("gpus: 65", "gpus", "up to 64"),
        ("gpus: 1.0e+300", "gpus", "up to 64"),
        ("cpus: 1025", "cpus", "up to 1024"),
        ("cpus: -.inf", "cpus", "not a finite number"),
        ("cpus: " + HUGE, "cpus", "up to 1024"),
        ("storage: 1025Ti", "storage", "1 PiB"),
        ("checkpoint: {interval_s: 86401}", "checkpoint.interval_s", "86400"),
        ("checkpoint: {interval_s: .inf}", "checkpoint.interval_s", "not a finite number"),
        ("checkpoint: {keep: 101}", "checkpoint.keep", "100"),
        ("restart_policy: {max_restarts: 101}", "restart_policy.max_restarts", "100"),
        ("restart_policy: {max_restarts: " + HUGE + "}", "restart_policy.max_restarts", "2**63"),
        ("restart_policy: {backoff_s: 3601}", "restart_policy.backoff_s", "3600"),
        ("restart_policy: {backoff_max_s: .nan}", "restart_policy.backoff_max_s", "finite"),
        ("restart_policy: {identical_failures: 101}", "restart_policy.identical_failures", "100"),
        (
            "restart_policy: {heartbeat_timeout_s: 86401}",
            "restart_policy.heartbeat_timeout_s",
            "86400",
        ),
        (
            "restart_policy: {fail_on_exit_codes: [256]}",
            "restart_policy.fail_on_exit_codes[0]",
            "from 1 to 255",
        ),
        (
            "parameter_server: {mode: bounded, staleness: 10001}",
            "parameter_server.staleness",
            "10000",
        ),
        ("elastic: {min_learners: 65}", "elastic.min_learners", "64"),
        ("elastic: {max_learners: " + HUGE + "}", "elastic.max_learners", "2**63 - 1"),
        ("evaluation_metrics: {line_lookahead: 1001}", "evaluation_metrics.line_lookahead", "1000"),
        ("model_definition: {size: .inf}", "model_definition.size", "not a finite number"),
        ("model_definition: {size: " + HUGE + "}", "model_definition.size", "2**63 - 1"),
        ("environment: {N: .nan}", "environment.N", "not a finite number"),
        ("tags: [1, 2, " + "9" * 500 + "]", "tags[2]", "500 characters long"),
    ],
)
def test_every_number_is_range_checked_naming_the_field(extra: str, field: str, words: str) -> None:
    err = refuse(with_minimal(extra + "\n"))
    assert err.field == field
    assert err.detail.startswith(f"invalid manifest: {field}:")
    assert words in err.detail


def test_all_errors_listed() -> None:
    err = refuse(with_minimal("learners: 0\ngpus: -1\ncpus: 0\n"))
    assert err.field == "learners"
    for field in ("learners:", "gpus:", "cpus:"):
        assert field in err.detail


# --- framework.command --------------------------------------------------------------------

FIX = "add framework.command: the shell command that starts training, e.g. python train.py"


@pytest.mark.parametrize(
    "text",
    [
        "name: x\nframework:\n  name: pytorch\n",
        "framework: {command: ''}\n",
        "framework: {command: '   '}\n",
        "framework: {command: null}\n",
    ],
)
def test_missing_or_empty_command(text: str) -> None:
    err = refuse(text)
    assert err.field == "framework.command"
    assert FIX in err.detail


def test_missing_framework() -> None:
    err = refuse("name: x\n")
    assert err.field == "framework"
    assert "command: python train.py" in err.detail
    assert refuse("framework: python train.py\n").field == "framework"


# --- YAML-level refusals ------------------------------------------------------------------


def test_malformed_yaml() -> None:
    err = refuse("name: x\nframework: {command: [unclosed\n")
    assert err.field == "manifest"
    assert re.search(
        r"manifest is not valid YAML: line \d+ column \d+: .+; fix the YAML", err.detail
    )
    err = refuse("name: x\n  bad: indent\n")
    assert "line 2 column" in err.detail


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "empty"),
        ("# only a comment\n", "empty"),
        ("- a\n- b\n", "not a list"),
        ("just a string\n", "not a plain string"),
        ("42\n", "not a number"),
        ("true\n", "not a true/false value"),
    ],
)
def test_not_a_mapping(text: str, words: str) -> None:
    err = refuse(text)
    assert err.field == "manifest"
    assert words in err.detail


def test_size_limit() -> None:
    big = MINIMAL + "description: '" + "x" * MAX_MANIFEST_BYTES + "'\n"
    err = refuse(big)
    assert err.field == "manifest" and "64 KiB" in err.detail
    assert refuse(big.encode()).field == "manifest"


def test_not_utf8() -> None:
    err = refuse(b"name: \xff\xfe\xfa\n" + MINIMAL.encode())
    assert "UTF-8" in err.detail


def test_utf8_bom_and_unicode_accepted() -> None:
    m = parse_manifest("\ufeffname: modèle-日本\n".encode() + MINIMAL.encode())
    assert m.name == "modèle-日本"


def merge_key_bomb(levels: int) -> str:
    """Each level merges the one below twice: the object doubles with every level."""
    lines = ["b0: &b0 {k0: v}"]
    lines += [f"b{i}: &b{i} {{<<: [*b{i - 1}, *b{i - 1}], k{i}: v}}" for i in range(1, levels)]
    return MINIMAL + "\n".join(lines) + "\n"


def billion_laughs(levels: int) -> str:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return MINIMAL + "\n".join(lines) + "\n"


@pytest.fixture
def nothing_constructed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails the test if a document reaches construction, where a bomb's cost would be paid."""

    def refuse_to_construct(*_args: object) -> object:
        raise AssertionError("a refused document was constructed")

    monkeypatch.setattr(bounded_yaml._CountingLoader, "construct_document", refuse_to_construct)


@pytest.mark.parametrize(
    "text",
    [merge_key_bomb(18), merge_key_bomb(60), billion_laughs(9), billion_laughs(30)],
    ids=["merge-keys-18", "merge-keys-60", "laughs-9", "laughs-30"],
)
@pytest.mark.usefixtures("nothing_constructed")
def test_expanding_yaml_is_refused_before_it_is_constructed(text: str) -> None:
    err = refuse(text)
    assert err.field == "manifest"
    assert f"more than {MAX_NODES} values" in err.detail
    assert "merge keys count each use" in err.detail


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("x: &loop [a, *loop]\n", "x[1]"),
        ("x: &loop {a: {b: *loop}}\n", "x.a.b"),
        ("x: &loop {<<: *loop}\n", "x.<<"),
    ],
)
@pytest.mark.usefixtures("nothing_constructed")
def test_a_recursive_anchor_is_refused(text: str, where: str) -> None:
    err = refuse(MINIMAL + text)
    assert err.field == "manifest"
    assert f"the alias at {where} refers to the anchor that contains it" in err.detail


@pytest.mark.parametrize(
    "text",
    [
        "x: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "\n",
        "".join(" " * i + f"k{i}:\n" for i in range(MAX_DEPTH + 2)) + " " * 40 + "v\n",
        "a: &a " + "[" * 20 + "]" * 20 + "\nb: [[[[[[*a]]]]]]\n",
    ],
    ids=["flow", "block", "through-an-alias"],
)
@pytest.mark.usefixtures("nothing_constructed")
def test_nesting_deeper_than_the_limit_is_refused_naming_it(text: str) -> None:
    err = refuse(MINIMAL + text)
    assert err.field == "manifest"
    assert f"nests deeper than {MAX_DEPTH} levels" in err.detail


def test_anchors_and_merge_keys_within_the_limits_are_accepted() -> None:
    m = parse_manifest(
        MINIMAL
        + "base: &base {a: 1, b: [x, y]}\n"
        + "one: {<<: *base, c: 3}\n"
        + "two: {<<: [*base], a: 2}\n"
        + "deep: "
        + "[" * MAX_DEPTH
        + "]" * MAX_DEPTH
        + "\n"
    )
    n = m.normalized()
    assert n["one"] == {"a": 1, "b": ["x", "y"], "c": 3}
    assert n["two"] == {"a": 2, "b": ["x", "y"]}


def test_alias_bomb_refused_quickly() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    err = refuse(MINIMAL + "\n".join(lines) + "\n")
    assert err.field == "manifest" and "anchors/aliases" in err.detail


def test_deep_nesting_refused() -> None:
    err = refuse(MINIMAL + "x: " + "[" * 200 + "]" * 200 + "\n")
    assert err.field == "manifest"


def test_python_tags_refused() -> None:
    err = refuse(MINIMAL + "x: !!python/object/apply:os.system ['true']\n")
    assert "not valid YAML" in err.detail


def test_non_text_keys_and_binary_values_refused() -> None:
    err = refuse(MINIMAL + "yes: 1\n")
    assert "not text" in err.detail and "quote it" in err.detail
    err = refuse(MINIMAL + "blob: !!binary aGVsbG8=\n")
    assert err.field == "blob" and "bytes" in err.detail


def test_nothing_else_ever_escapes() -> None:
    rng = random.Random(1234)
    seeds = [p.read_bytes() for p in SAMPLES]
    alphabet = b" :-\n\t{}[]'\"&*!|>#%@`,?0123456789abcxyz\\\x00\xff"
    for _ in range(400):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 6)):
            at = rng.randrange(len(data))
            op = rng.random()
            if op < 0.4:
                data[at] = rng.choice(alphabet)
            elif op < 0.7:
                del data[at : at + rng.randint(1, 20)]
            else:
                data[at:at] = bytes(rng.choice(alphabet) for _ in range(rng.randint(1, 5)))
        try:
            parse_manifest(bytes(data))
        except Invalid as err:
            assert err.field and err.detail
            assert "Traceback" not in err.detail


# --- dlaas blocks -------------------------------------------------------------------------


def test_dlaas_blocks_accepted() -> None:
    m = parse_manifest(
        with_minimal(
            "learners: 4\n"
            "checkpoint: {interval_s: 12.5, keep: 5}\n"
            "restart_policy: {max_restarts: 0, backoff_s: 0.5, backoff_max_s: 10}\n"
            "parameter_server: {mode: bounded, staleness: 4}\n"
            "elastic: {min_learners: 2, max_learners: 8}\n"
        )
    )
    assert (m.checkpoint.interval_s, m.checkpoint.keep) == (12.5, 5)
    assert m.restart_policy.max_restarts == 0
    assert m.parameter_server is not None
    assert (m.parameter_server.mode, m.parameter_server.staleness) == ("bounded", 4)
    assert m.elastic is not None
    assert (m.elastic.min_learners, m.elastic.max_learners) == (2, 8)


def test_elastic_batch_range_and_performance_read() -> None:
    m = parse_manifest(
        with_minimal(
            "elastic: {min_learners: 1, max_learners: 4, min_batch_size: 32,"
            " max_batch_size: 256, max_learner_batch_size: 96}\n"
            "performance: {sample_seconds: 0.002, step_overhead_seconds: 0.01,"
            " model_bytes: 4000000, samples: 600000}\n"
        )
    )
    assert m.elastic is not None and m.performance is not None
    assert (m.elastic.min_batch_size, m.elastic.max_batch_size) == (32, 256)
    assert m.performance.model_bytes == 4_000_000 and m.performance.samples == 600_000
    # the largest batch of the range the learners hold in whole, equal shares
    assert [m.elastic.batch_for(n) for n in (1, 2, 3, 4)] == [96, 192, 255, 256]


def test_a_step_may_cost_flops_instead_of_seconds() -> None:
    m = parse_manifest(with_minimal("performance: {flops_per_sample: 3.6e+9, batch_size: 64}\n"))
    assert m.performance is not None
    assert (m.performance.flops_per_sample, m.performance.sample_seconds) == (3.6e9, None)
    assert m.normalized()["performance"]["flops_per_sample"] == 3.6e9


def test_a_job_without_a_batch_range_has_no_elastic_batch() -> None:
    m = parse_manifest(with_minimal("elastic: {min_learners: 1, max_learners: 2}\n"))
    assert m.elastic is not None and m.elastic.batch_for(1) is None
    assert parse_manifest(with_minimal("parameter_server: {mode: sync}\n")).parameter_server


def test_restart_scope_and_exit_codes_accepted() -> None:
    m = parse_manifest(
        with_minimal("restart_policy: {scope: learner, fail_on_exit_codes: [3, 2, 3]}\n")
    )
    assert m.restart_policy.scope == "learner"
    assert m.normalized()["restart_policy"]["fail_on_exit_codes"] == [2, 3]


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        ("checkpoint: {interval: 3}", "checkpoint.interval", "allowed keys: interval_s"),
        ("checkpoint: {interval_s: 0}", "checkpoint.interval_s", "greater than 0"),
        ("checkpoint: {keep: 0}", "checkpoint.keep", "greater than or equal to 1"),
        ("restart_policy: {retries: 3}", "restart_policy.retries", "max_restarts"),
        (
            "restart_policy: {retries: 3}",
            "restart_policy.retries",
            "identical_failures, heartbeat_timeout_s, scope (gang or learner) and "
            "fail_on_exit_codes",
        ),
        ("restart_policy: {scope: pod}", "restart_policy.scope", "'gang' or 'learner'"),
        ("restart_policy: {scope: pod}", "restart_policy.scope", "learner (only the failed"),
        (
            "restart_policy: {scope: learner}\nparameter_server: {mode: async}",
            "restart_policy.scope",
            "use scope: gang or remove the parameter_server block",
        ),
        (
            "restart_policy: {fail_on_exit_codes: [0]}",
            "restart_policy.fail_on_exit_codes[0]",
            "exit codes from 1 to 255",
        ),
        (
            "restart_policy: {fail_on_exit_codes: 2}",
            "restart_policy.fail_on_exit_codes",
            "valid list",
        ),
        (
            "restart_policy: {backoff_s: 5, backoff_max_s: 1}",
            "restart_policy.backoff_max_s",
            "make backoff_max_s at least backoff_s",
        ),
        ("parameter_server: {mode: eventual}", "parameter_server.mode", "'async', 'sync'"),
        ("parameter_server: {mode: bounded}", "parameter_server.staleness", "staleness: 4"),
        ("parameter_server: {staleness: 2}", "parameter_server.staleness", "mode: bounded"),
        (
            "elastic: {min_learners: 4, max_learners: 2}",
            "elastic.max_learners",
            "at least min_learners",
        ),
        ("elastic: {min_learners: 2}", "learners", "must lie between"),
        ("elastic: {step: 2}", "elastic.step", "min_learners, max_learners, min_batch_size"),
        ("elastic: {min_batch_size: 32}", "elastic.max_batch_size", "together"),
        ("elastic: {max_batch_size: 32}", "elastic.min_batch_size", "together"),
        (
            "elastic: {min_batch_size: 64, max_batch_size: 32}",
            "elastic.max_batch_size",
            "at least min_batch_size",
        ),
        (
            "elastic: {min_learners: 1, max_learners: 4, min_batch_size: 4, max_batch_size: 8,"
            " max_learner_batch_size: 2}",
            "learners",
            "widen the range",
        ),
        ("elastic: {max_learner_batch_size: 8}", "elastic.max_learner_batch_size", "range"),
        ("elastic: {min_batch_size: 0, max_batch_size: 8}", "elastic.min_batch_size", "1"),
        (
            "elastic: {min_batch_size: 8, max_batch_size: 64}\n"
            "performance: {sample_seconds: 0.01, batch_size: 32}",
            "performance.batch_size",
            "remove performance.batch_size",
        ),
        ("performance: {model_bytes: 10}", "performance.sample_seconds", "missing"),
        ("performance: {model_bytes: 10}", "performance.sample_seconds", "or flops_per_sample"),
        (
            "performance: {sample_seconds: 0.01, flops_per_sample: 3.0e+9}",
            "performance.flops_per_sample",
            "not both: remove flops_per_sample",
        ),
        ("performance: {flops_per_sample: 0}", "performance.flops_per_sample", "greater than 0"),
        ("performance: {flops_per_sample: .inf}", "performance.flops_per_sample", "finite"),
        (
            "performance: {flops_per_sample: 1.0e+19}",
            "performance.flops_per_sample",
            "less than or equal to 1000000000000000000",
        ),
        ("performance: {sample_seconds: 0}", "performance.sample_seconds", "greater than 0"),
        ("performance: {sample_seconds: .nan}", "performance.sample_seconds", "finite"),
        ("performance: {sample_seconds: 1, flops: 3}", "performance.flops", "sample_seconds"),
    ],
)
def test_dlaas_block_refusals(extra: str, field: str, words: str) -> None:
    err = refuse(with_minimal(extra + "\n"))
    assert err.field == field
    assert words in err.detail


# --- environment --------------------------------------------------------------------------


def test_environment_accepted_and_values_stringified() -> None:
    m = parse_manifest(with_minimal("environment: {OMP_NUM_THREADS: 2, _X: on, lower_ok: a}\n"))
    assert m.environment == {"OMP_NUM_THREADS": "2", "_X": "true", "lower_ok": "a"}


@pytest.mark.parametrize("name", [*sorted(RESERVED_ENV), "DLAAS_REDIS_URL", "DLAAS_ATTEMPT"])
def test_reserved_environment_refused(name: str) -> None:
    err = refuse(with_minimal(f"environment: {{{name}: x}}\n"))
    assert err.field == f"environment.{name}"
    assert "set by dlaas" in err.detail and "remove it" in err.detail


@pytest.mark.parametrize("name", ["1ABC", "A-B", "A B", "A.B"])
def test_bad_environment_names(name: str) -> None:
    err = refuse(with_minimal(f"environment: {{'{name}': x}}\n"))
    assert err.field == f"environment.{name}"
    assert "letters, digits and _" in err.detail


def test_environment_must_be_a_mapping() -> None:
    err = refuse(with_minimal("environment: [A=1]\n"))
    assert err.field == "environment" and "NAME: value" in err.detail


# --- secrets ------------------------------------------------------------------------------


def test_public_dict_drops_secrets_normalized_keeps_them() -> None:
    m = parse_manifest(
        with_minimal(
            "data_stores:\n"
            "  - id: s\n    type: s3_datastore\n"
            "    training_data: {container: d}\n    training_results: {container: r}\n"
            "    connection:\n"
            "      auth_url: http://s3\n      user_name: AKIA\n      password: hunter2\n"
            "      secret_access_key: s3cr3t\n      api_key: k3y\n      bucket: b\n"
            "environment: {WANDB_API_KEY: wandb-value, HF_TOKEN: hf-value, PLAIN: p}\n"
        )
    )
    normalized = m.normalized()
    conn = normalized["data_stores"][0]["connection"]
    assert conn["password"] == "hunter2" and conn["secret_access_key"] == "s3cr3t"
    public = m.public_dict()
    assert public["data_stores"][0]["connection"] == {
        "auth_url": "http://s3",
        "user_name": "AKIA",
        "bucket": "b",
    }
    assert public["environment"] == {"PLAIN": "p"}
    text = str(public)
    for secret in ("hunter2", "s3cr3t", "k3y", "wandb-value", "hf-value"):
        assert secret not in text


# --- evaluation metrics -------------------------------------------------------------------


def test_metric_patterns_from_ffdl_groups() -> None:
    m = parse_manifest((SAMPLES[0].parent / "caffe-regex-metrics.yml").read_bytes())
    patterns = metric_patterns(m)
    assert len(patterns) == 2
    line = "I0102 Iteration 100, loss = 0.125"
    found = [p.search(line) for p in patterns]
    match = next(f for f in found if f)
    assert match.groupdict() == {"iteration": "100", "loss": "0.125"}
    em = m.normalized()["evaluation_metrics"]
    assert em["groups"]["trainingIter"]["scalars"]["loss"] == {"type": "REAL", "value": "$loss"}
    assert em["eventTypes"] == {"keys": ["train", "test"]}
    assert em["line_lookahead"] == 4


def test_metric_patterns_group_dicts_and_native() -> None:
    m = parse_manifest(
        with_minimal(
            "evaluation_metrics:\n"
            "  groupDicts:\n    a: {regex: 'acc=(?P<acc>[0-9.]+)'}\n"
            "  regex: 'loss=(?P<loss>[0-9.]+)'\n"
        )
    )
    assert [p.pattern for p in metric_patterns(m)] == [
        "acc=(?P<acc>[0-9.]+)",
        "loss=(?P<loss>[0-9.]+)",
    ]
    assert metric_regexes(m.normalized()) == metric_regexes(m)
    many = parse_manifest(
        with_minimal(
            "evaluation_metrics:\n  regex: ['a=(?P<a>\\d)', 'b=(?P<b>\\d)', 'a=(?P<a>\\d)']\n"
        )
    )
    assert metric_regexes(many) == [r"a=(?P<a>\d)", r"b=(?P<b>\d)"]
    assert metric_regexes({}) == [] and metric_regexes({"evaluation_metrics": "x"}) == []


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        ("regex: 'loss=(?P<loss>[0-9.]+'", "evaluation_metrics.regex[0]", "does not compile"),
        ("regex: ['ok=(?P<ok>1)', 'no groups']", "evaluation_metrics.regex[1]", "names no group"),
        ("groups: {g: {regex: '(?P<x'}}", "evaluation_metrics.groups.g.regex", "does not compile"),
        ("groupDicts: {g: {regex: '[a'}}", "evaluation_metrics.groupDicts.g.regex", "compile"),
        ("line_lookahead: -1", "evaluation_metrics.line_lookahead", "greater than or equal"),
    ],
)
def test_metric_refusals(extra: str, field: str, words: str) -> None:
    err = refuse(with_minimal("evaluation_metrics:\n  " + extra + "\n"))
    assert err.field == field
    assert words in err.detail


def test_ffdl_group_without_named_groups_is_kept() -> None:
    m = parse_manifest(with_minimal("evaluation_metrics: {groups: {g: {regex: 'epoch \\d+'}}}\n"))
    assert metric_regexes(m) == [r"epoch \d+"]


def test_only_command_and_name_are_trimmed() -> None:
    m = parse_manifest(
        "name: ' job '\nframework: {command: '  python x.py  '}\n"
        "environment: {A: ' a '}\n"
        "data_stores: [{id: s, training_data: {container: c}, connection: {password: ' p '}}]\n"
    )
    assert (m.name, m.framework.command, m.environment["A"]) == ("job", "python x.py", " a ")
    assert m.data_stores is not None and m.data_stores[0].connection == {"password": " p "}
