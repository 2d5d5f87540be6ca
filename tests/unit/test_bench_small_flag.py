"""bench/_small.py: `--small` makes a benchmark's small sizes its defaults, and no more."""

from __future__ import annotations

import argparse

import pytest

from bench._small import parse_with_small


def parser() -> argparse.ArgumentParser:
    made = argparse.ArgumentParser()
    made.add_argument("--jobs", type=int, default=1000)
    made.add_argument("--window-s", type=float, default=20.0)
    return made


def test_without_the_flag_the_defaults_hold() -> None:
    args = parse_with_small(parser(), {"jobs": 10}, [])
    assert (args.small, args.jobs, args.window_s) == (False, 1000, 20.0)


def test_the_flag_shrinks_what_it_names() -> None:
    args = parse_with_small(parser(), {"jobs": 10}, ["--small"])
    assert (args.small, args.jobs, args.window_s) == (True, 10, 20.0)


def test_an_option_given_beside_the_flag_wins() -> None:
    args = parse_with_small(parser(), {"jobs": 10, "window_s": 1.0}, ["--jobs", "50", "--small"])
    assert (args.jobs, args.window_s) == (50, 1.0)


def test_a_size_the_parser_does_not_have_is_refused() -> None:
    with pytest.raises(ValueError, match="jobz"):
        parse_with_small(parser(), {"jobz": 10}, ["--small"])
