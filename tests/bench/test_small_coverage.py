"""Every benchmark of bench/ is run in its --small mode by one of tests/bench's modules."""

from __future__ import annotations

import pytest

from tests.bench.small_runs import BENCH_DIR, BENCHMARKS_RUN, benchmark_modules, figures_of

# benchmarks that have no --small mode yet; once one has, it moves to a list of small_runs.py
WITHOUT_SMALL: frozenset[str] = frozenset()


def test_every_benchmark_is_run_small() -> None:
    modules = benchmark_modules()
    assert set(BENCHMARKS_RUN) <= modules
    assert modules - set(BENCHMARKS_RUN) <= WITHOUT_SMALL, "add it to tests/bench/small_runs.py"
    for name in BENCHMARKS_RUN:
        assert "parse_with_small(" in (BENCH_DIR / f"{name}.py").read_text(), name


def test_a_benchmark_without_a_small_mode_is_listed_as_such() -> None:
    for name in WITHOUT_SMALL & benchmark_modules():
        text = (BENCH_DIR / f"{name}.py").read_text()
        assert "parse_with_small(" not in text and '"--small"' not in text, (
            f"bench/{name}.py has --small now: run it in tests/bench/small_runs.py"
        )


@pytest.mark.parametrize(
    "output",
    ["", "progress\n", 'done\n["a list"]\n', '{"bench": "x", "ok": true, "name": "n"}\n'],
    ids=["nothing", "no-json", "not-an-object", "no-number"],
)
def test_output_without_a_final_figure_is_refused(output: str) -> None:
    with pytest.raises((AssertionError, ValueError)):
        figures_of(output)


def test_the_last_line_gives_the_figures() -> None:
    assert figures_of('progress\n{"bench": "x", "rate_per_s": 1.5}\n') == {
        "bench": "x",
        "rate_per_s": 1.5,
    }
