"""The pages' own decisions, run in the browser as the pages run them: a job's time in each
state, its restarts and the work each lost, and how metric points become chart series."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page

from tests.platform import Platform


@pytest.fixture
def modules(page: Page, platform: Platform) -> Page:
    page.goto(f"{platform.url}/ui/")
    page.wait_for_selector("main[data-page]")
    return page


def run(page: Page, module: str, body: str) -> Any:
    """Evaluate `body` (a function of the imported module `m`) in the page."""
    return page.evaluate(
        f"async () => {{ const m = await import('/ui/static/js/{module}'); {body} }}"
    )


EVENTS = """[
  {time: "2026-01-01T00:00:00Z", kind: "submitted", to_state: "QUEUED", detail: {}},
  {time: "2026-01-01T00:00:02Z", kind: "transition", to_state: "RUNNING", detail: {}},
  {time: "2026-01-01T00:00:10Z", kind: "checkpoint", detail: {name: "ckpt-1"}},
  {time: "2026-01-01T00:00:25Z", kind: "restart", reason: "learner 2 failed",
   detail: {failure: {learner: 2, cause: "oom"}}},
  {time: "2026-01-01T00:00:25Z", kind: "transition", to_state: "RECOVERING", detail: {}},
  {time: "2026-01-01T00:00:30Z", kind: "transition", to_state: "RUNNING", detail: {}},
  {time: "2026-01-01T00:00:50Z", kind: "restart", reason: "learner 1 failed",
   detail: {failure: {learner: 1, cause: "exit", checkpoint: "ckpt-1"}}},
  {time: "2026-01-01T00:01:00Z", kind: "transition", to_state: "COMPLETED", detail: {}}
]"""


def test_time_in_each_state_adds_up_the_spans_between_changes(modules: Page) -> None:
    totals = run(
        modules,
        "timeline.js",
        f"const spans = m.stateSpans({EVENTS}, Date.parse('2030-01-01'));"
        "return Object.fromEntries(m.timeInStates(spans));",
    )
    assert totals == {
        "QUEUED": 2000,
        "RUNNING": 23000 + 30000,
        "RECOVERING": 5000,
        "COMPLETED": 0,  # a final state ends the timeline, whatever the clock says
    }


def test_each_restart_names_its_cause_and_the_work_since_the_checkpoint_it_resumes_from(
    modules: Page,
) -> None:
    found = run(modules, "timeline.js", f"return m.restarts({EVENTS});")
    assert [(r["learner"], r["cause"], r["checkpoint"], r["lostSeconds"]) for r in found] == [
        (2, "oom", "ckpt-1", 15.0),  # 10 s -> 25 s since ckpt-1 was committed
        (1, "exit", "ckpt-1", 40.0),
    ]


def test_a_restart_before_any_checkpoint_lost_everything_since_the_learners_started(
    modules: Page,
) -> None:
    found = run(
        modules,
        "timeline.js",
        """return m.restarts([
          {time: "2026-01-01T00:00:00Z", kind: "transition", to_state: "RUNNING", detail: {}},
          {time: "2026-01-01T00:00:07Z", kind: "restart", reason: "x",
           detail: {failure: {learner: 1, cause: "exit"}}}]);""",
    )
    assert found[0]["checkpoint"] is None and found[0]["lostSeconds"] == 7.0


def test_a_restarted_jobs_repeated_steps_chart_once_in_step_order_the_later_value_standing(
    modules: Page,
) -> None:
    series = run(
        modules,
        "charts.js",
        """const points = [1, 2, 3, 2, 3, 4].map((step, i) => ({
             learner: 1, time: i, step, values: {loss: i < 3 ? 10 + step : step}}));
           return [...m.byMetric(points, (p) => p.learner).get("loss").get(1)];""",
    )
    assert series == [[1, 11], [2, 2], [3, 3], [4, 4]]


def test_throughput_counts_steps_a_second_within_each_run_of_rising_steps(modules: Page) -> None:
    rates = run(
        modules,
        "charts.js",
        """const points = [];
           for (let i = 0; i < 5; i++) points.push({learner: 1, time: i, step: 2 * i, values: {}});
           for (let i = 0; i < 5; i++) points.push({learner: 1, time: 10 + i, step: i, values: {}});
           return [...m.throughput(points, (p) => p.learner, 2).get(1)];""",
    )
    # 2 steps a second in the first run (steps 4, 6, 8), 1 in the second (steps 2, 3, 4:
    # its step 4 stands over the first run's); never a rate across the restart
    assert rates == [[2, 1], [3, 1], [4, 1], [6, 2], [8, 2]]


def test_series_of_different_steps_are_aligned_on_one_axis_with_gaps(modules: Page) -> None:
    data = run(
        modules,
        "charts.js",
        """const series = new Map([["a", [[1, 5], [3, 7]]], ["b", [[2, 6], [3, 8]]]]);
           return m.aligned(series).data;""",
    )
    assert data == [[1, 2, 3], [5, None, 7], [None, 6, 8]]
