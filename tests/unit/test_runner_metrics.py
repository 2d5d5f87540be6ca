"""Metric parsing of training output lines: the job's regexes and the SDK's JSON lines."""

from __future__ import annotations

import json

from learner_image.metric_lines import parse_metric_line
from learner_image.metrics_parser import (
    MetricRecord,
    MetricsParser,
    compile_patterns,
    match_patterns,
    to_step,
)


def patterns(*regexes: str) -> MetricsParser:
    compiled = compile_patterns(json.dumps(list(regexes)))
    assert compiled.problems == ()
    return MetricsParser(compiled, parse_metric_line)


def test_named_numeric_groups_become_values_and_step_group_the_step() -> None:
    parser = patterns(r"step (?P<step>\d+): loss=(?P<loss>[-+.\deE]+) acc=(?P<acc>[\d.]+)")
    record = parser.parse("step 12: loss=3.5e-1 acc=0.91")
    assert record == MetricRecord(12, {"loss": 0.35, "acc": 0.91})


def test_iteration_and_iter_groups_are_steps_too() -> None:
    assert patterns(r"iteration (?P<iteration>\d+) (?P<loss>[\d.]+)").parse(
        "iteration 7 0.5"
    ) == MetricRecord(7, {"loss": 0.5})
    assert patterns(r"iter=(?P<iter>\d+) lr=(?P<lr>[\d.]+)").parse("iter=3 lr=0.1") == (
        MetricRecord(3, {"lr": 0.1})
    )


def test_non_numeric_groups_are_ignored_and_no_value_means_no_record() -> None:
    parser = patterns(r"(?P<phase>\w+) step (?P<step>\d+) loss (?P<loss>\S+)")
    assert parser.parse("train step 1 loss 0.25") == MetricRecord(1, {"loss": 0.25})
    assert parser.parse("train step 1 loss nan") is None
    assert parser.parse("train step 1 loss abc") is None
    assert parser.parse("unrelated output") is None


def test_values_of_several_matching_patterns_merge() -> None:
    parser = patterns(r"loss=(?P<loss>[\d.]+)", r"acc=(?P<acc>[\d.]+)", r"step (?P<step>\d+)")
    assert parser.parse("step 4 loss=0.5 acc=0.75") == MetricRecord(4, {"loss": 0.5, "acc": 0.75})


def test_step_only_line_is_not_a_metric() -> None:
    assert match_patterns("step 4", compile_patterns('["step (?P<step>\\\\d+)"]')) is None


def test_json_metric_lines_come_first() -> None:
    parser = patterns(r"loss (?P<loss>[\d.]+)")
    line = '{"dlaas_metric": true, "step": 5, "loss": 0.125, "acc": 1}'
    assert parser.parse(line) == MetricRecord(5, {"loss": 0.125, "acc": 1.0})
    assert parser.parse('{"step": 5, "loss": 0.125}') is None  # no marker


def test_json_metric_lines_work_without_patterns() -> None:
    parser = MetricsParser(compile_patterns(None), parse_metric_line)
    assert parser.parse('{"dlaas_metric": true, "loss": 2}') == MetricRecord(None, {"loss": 2.0})
    assert parser.parse("loss 2") is None


def test_bad_patterns_are_skipped_and_described() -> None:
    result = compile_patterns(json.dumps(["(?P<loss>[", "no groups", 5, r"l=(?P<l>\d+)"]))
    assert len(result.compiled) == 1
    assert len(result.problems) == 3
    assert "not a valid regex" in result.problems[0]
    assert "no named groups" in result.problems[1]
    assert "not a string" in result.problems[2]


def test_patterns_that_are_not_a_json_list() -> None:
    assert compile_patterns("not json").problems
    assert compile_patterns('{"a": 1}').problems
    assert compile_patterns('"loss=(?P<loss>\\\\d+)"').compiled  # a single string is accepted
    assert compile_patterns("").compiled == ()


def test_to_step() -> None:
    assert to_step("10") == 10
    assert to_step("10.0") == 10
    assert to_step("1e3") == 1000
    assert to_step("1.5") is None
    assert to_step(True) is None
    assert to_step(None) is None
    assert to_step(7) == 7


def test_odd_digit_strings_are_steps_or_nothing_never_an_error() -> None:
    assert to_step("007") == 7
    assert to_step("\u00b2") is None  # str.isdigit() says yes, int() says no
    assert to_step("9" * 5000) is None  # past int()'s digit limit, and no finite float
    assert to_step("1" * 30) == int(float("1" * 30))
    parser = patterns(r"step (?P<step>\d+) loss (?P<loss>[\d.]+)")
    assert parser.parse("step " + "9" * 5000 + " loss 0.5") == MetricRecord(None, {"loss": 0.5})
