"""Bounded YAML: sizes counted as constructed, each node measured once, limits named."""

from __future__ import annotations

import pytest

from api import bounded_yaml
from api.bounded_yaml import DocumentRefused, ValueRefused, YamlLimits, load_bounded_yaml

ROOMY = YamlLimits(max_values=10_000, max_depth=10, max_number_chars=20)
REUSED = "a: &a [1, 2, 3]\nb: [*a, *a, *a]\n"
# top mapping 1, key a 1, list a 1 + 3, key b 1, list b 1 + 3 * 4
REUSED_VALUES = 20


def test_plain_documents_load_as_a_safe_loader_reads_them() -> None:
    assert load_bounded_yaml(REUSED, ROOMY) == {"a": [1, 2, 3], "b": [[1, 2, 3]] * 3}
    assert load_bounded_yaml("", ROOMY) is None
    assert load_bounded_yaml("x: {<<: {k: 1}, j: 2}\n", ROOMY) == {"x": {"k": 1, "j": 2}}


def test_every_use_of_an_alias_counts_its_whole_subtree() -> None:
    exact = YamlLimits(REUSED_VALUES, ROOMY.max_depth, ROOMY.max_number_chars)
    assert load_bounded_yaml(REUSED, exact) is not None
    one_less = YamlLimits(REUSED_VALUES - 1, ROOMY.max_depth, ROOMY.max_number_chars)
    with pytest.raises(DocumentRefused, match=f"more than {REUSED_VALUES - 1} values"):
        load_bounded_yaml(REUSED, one_less)


def test_each_node_is_measured_once_however_often_it_is_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    levels = 60  # 2**60 values once constructed
    lines = ["b0: &b0 {k: v}"]
    lines += [f"b{i}: &b{i} {{<<: [*b{i - 1}, *b{i - 1}]}}" for i in range(1, levels)]
    measured = 0
    measure_collection = bounded_yaml._Measurer._measure_collection

    def counted(self: bounded_yaml._Measurer, *args: object) -> object:
        nonlocal measured
        measured += 1
        return measure_collection(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(bounded_yaml._Measurer, "_measure_collection", counted)
    monkeypatch.setattr(bounded_yaml._CountingLoader, "construct_document", lambda *_: "not built")
    endless = YamlLimits(max_values=2**70, max_depth=levels * 3, max_number_chars=20)
    assert load_bounded_yaml("\n".join(lines), endless) == "not built"
    # the top mapping, b0, then a mapping and its `<<` list per level (aliases add no node)
    assert measured == 2 + 2 * (levels - 1)


def test_composing_stops_once_the_nodes_alone_pass_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def never(*_args: object) -> object:
        raise AssertionError("measured a document whose nodes alone are too many")

    monkeypatch.setattr(bounded_yaml._Measurer, "measure", never)
    few = YamlLimits(max_values=10, max_depth=10, max_number_chars=20)
    with pytest.raises(DocumentRefused, match="more than 10 values"):
        load_bounded_yaml("[" + ", ".join(["1"] * 50) + "]", few)


def test_a_number_too_long_is_refused_where_it_is() -> None:
    with pytest.raises(ValueRefused) as info:
        load_bounded_yaml("a: {b: [1, " + "9" * 21 + "]}\n", ROOMY)
    assert info.value.path == "a.b[1]"
    assert "21 characters long, above the limit of 20" in info.value.problem
    assert load_bounded_yaml("a: '" + "9" * 50 + "'\n", ROOMY) == {"a": "9" * 50}


def test_depth_is_counted_through_aliases() -> None:
    text = "a: &a [[[1]]]\nb: [[[[[[[*a]]]]]]]\n"
    with pytest.raises(DocumentRefused, match="nests deeper than 10 levels"):
        load_bounded_yaml(text, ROOMY)
    assert load_bounded_yaml("a: &a [[[1]]]\nb: [[[[[*a]]]]]\n", ROOMY) is not None


def test_a_key_given_twice_is_refused_where_it_is() -> None:
    with pytest.raises(ValueRefused) as refused:
        load_bounded_yaml("name: a\nframework:\n  gpus: 4\n  gpus: 0\n", ROOMY)
    assert refused.value.path == "framework.gpus"
    assert "twice" in refused.value.problem and "line 4" in refused.value.problem


def test_a_merge_key_may_be_overridden() -> None:
    text = "base: &b {gpus: 1, cpus: 2}\njob:\n  <<: *b\n  gpus: 4\n"
    assert load_bounded_yaml(text, ROOMY) == {
        "base": {"gpus": 1, "cpus": 2},
        "job": {"gpus": 4, "cpus": 2},
    }
