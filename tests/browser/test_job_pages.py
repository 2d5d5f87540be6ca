"""The dashboard's pages driven as a user drives them: submitting the digits example through
the page and watching it train, halting and resuming, comparing, and the cluster view."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from cli.archive import zip_directory
from tests.browser.dashboard import assert_accessible, sign_in
from tests.browser.jobs import STEADY_JOB, steady_manifest, submit_steady
from tests.platform import Platform

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits"
TRAINING_S = 300_000  # ms: the digits example trains in about a minute on an idle machine
STATE_S = 120_000


def job_state(page: Page) -> str:
    return str(page.locator(".job-head").get_attribute("data-state"))


def chart_points(page: Page, metric: str) -> int:
    figure = page.locator(f"figure.chart[data-metric='{metric}']")
    if figure.count() == 0:
        return 0
    return int(figure.get_attribute("data-points") or 0)


def test_submitting_the_digits_example_through_the_page_trains_it_with_live_logs_and_charts(
    page: Page, platform: Platform, tmp_path: Path
) -> None:
    # the example as it is, trained for fewer epochs: the page is under test, not the model
    manifest = tmp_path / "manifest.yml"
    text = (EXAMPLE / "manifest.yml").read_text()
    manifest.write_text(text.replace("--epochs 12", "--epochs 4"))
    assert manifest.read_text() != text
    platform.dlaas("data", "upload", "digits-data", str(EXAMPLE / "data" / "digits.npz"))
    sign_in(page, platform.url, platform.token)
    page.get_by_role("link", name="Submit a job").click()
    expect(page.locator("[data-page=submit]")).to_be_visible()
    assert_accessible(page)

    page.set_input_files("#manifest", str(manifest))
    page.set_input_files("#model-folder", str(EXAMPLE / "model"))
    expect(page.locator(".chosen")).to_contain_text("model folder")
    page.get_by_role("button", name="Submit job").click()

    expect(page.locator("[data-page=job]")).to_be_visible(timeout=60_000)
    job_id = page.locator("main").get_attribute("data-job")
    assert job_id and job_id.startswith("training-")
    # while it trains: lines stream in and the loss chart gains points
    expect(page.locator("pre.log .line").first).to_be_visible(timeout=TRAINING_S)
    expect(page.locator("figure.chart[data-metric=loss]")).to_be_visible(timeout=TRAINING_S)
    first = chart_points(page, "loss")
    page.wait_for_function(
        f'() => Number(document.querySelector("figure.chart[data-metric=loss]")'
        f".dataset.points) > {first} || "
        "document.querySelector('.job-head').dataset.state === 'COMPLETED'",
        timeout=TRAINING_S,
    )
    expect(page.locator(".job-head")).to_have_attribute(
        "data-state", "COMPLETED", timeout=TRAINING_S
    )
    assert chart_points(page, "loss") > first, "the loss chart gained no points while training"
    expect(page.locator("pre.log")).to_contain_text("final accuracy", timeout=STATE_S)
    expect(page.locator("[aria-label=results]")).to_contain_text("model.pt", timeout=STATE_S)
    expect(page.locator("[aria-label=checkpoints]")).to_contain_text("COMMITTED")
    expect(page.locator("svg.timeline rect.state-running")).to_have_count(1)
    assert platform.show(job_id)["job"]["state"] == "COMPLETED"
    assert_accessible(page)


def test_a_broken_manifest_is_refused_with_the_error_beside_the_field(
    page: Page, platform: Platform, tmp_path: Path
) -> None:
    broken = tmp_path / "manifest.yml"
    broken.write_text("name: broken\nlearners: 0\nframework:\n  name: python\n  command: x\n")
    sign_in(page, platform.url, platform.token)
    page.goto(f"{platform.url}/ui/jobs/new")
    page.set_input_files("#manifest", str(broken))
    page.set_input_files("#model-folder", str(EXAMPLE / "model"))
    page.get_by_role("button", name="Submit job").click()

    error = page.locator("#manifest-error")
    expect(error).to_be_visible(timeout=30_000)
    expect(error).to_contain_text("learners")
    expect(page.locator("#model-error")).to_be_hidden()
    expect(page.locator("[data-page=submit]")).to_be_visible()
    assert_accessible(page)


def test_a_job_is_halted_resumed_and_deleted_from_its_page(
    page: Page, platform: Platform, tmp_path: Path
) -> None:
    job_id = submit_steady(platform, tmp_path, "halt-me", steps=100_000, step_s=0.2)
    sign_in(page, platform.url, platform.token)
    page.goto(f"{platform.url}/ui/jobs/{job_id}")
    expect(page.locator(".job-head")).to_have_attribute("data-state", "RUNNING", timeout=STATE_S)
    expect(page.locator("pre.log")).to_contain_text("steady: learner 1, attempt 1", timeout=STATE_S)

    page.get_by_role("button", name="Halt halt-me").click()
    expect(page.locator(".job-head")).to_have_attribute("data-state", "HALTED", timeout=STATE_S)
    page.get_by_role("button", name="Resume halt-me").click()
    expect(page.locator(".job-head")).to_have_attribute("data-state", "RUNNING", timeout=STATE_S)
    # the log view follows the job again where it stopped, into its second attempt
    expect(page.locator("pre.log")).to_contain_text("attempt 2", timeout=STATE_S)
    expect(page.locator("ol.events")).to_contain_text("halt", timeout=STATE_S)

    page.get_by_role("button", name="Delete halt-me").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Delete halt-me?")
    assert_accessible(page)
    dialog.get_by_role("button", name="Delete").click()
    expect(page.locator("[role=alert]")).to_contain_text(job_id, timeout=STATE_S)
    page.goto(f"{platform.url}/ui/")
    expect(page.locator("table.jobs[data-loaded]")).to_be_visible()
    expect(page.locator(f"tr[data-job='{job_id}']")).to_have_count(0)


def test_two_jobs_picked_on_the_jobs_page_are_compared_metric_by_metric(
    page: Page, platform: Platform, tmp_path: Path
) -> None:
    first = submit_steady(platform, tmp_path, "compare-low", steps=30, step_s=0.01, scale=1.0)
    second = submit_steady(platform, tmp_path, "compare-high", steps=30, step_s=0.01, scale=3.0)
    for job_id in (first, second):
        platform.wait_for(
            job_id, "COMPLETED", lambda s: s["job"]["state"] == "COMPLETED", STATE_S / 1000
        )
    sign_in(page, platform.url, platform.token)
    compare = page.get_by_role("button", name="Compare selected")
    expect(compare).to_be_disabled()
    page.get_by_role("checkbox", name="Select compare-low to compare").check()
    page.get_by_role("checkbox", name="Select compare-high to compare").check()
    compare.click()

    expect(page.locator("[data-page=compare]")).to_be_visible()
    chart = page.locator("figure.chart[data-metric=loss]")
    expect(chart).to_have_attribute("data-points", "30", timeout=30_000)
    legend = chart.locator(".u-legend .u-series")
    expect(legend).to_have_count(3)  # the x axis and one series per job
    expect(chart.locator(".u-legend")).to_contain_text(f"compare-low ({first})")
    expect(chart.locator(".u-legend")).to_contain_text(f"compare-high ({second})")
    assert_accessible(page)


def test_the_cluster_page_shows_what_a_running_job_holds_of_the_node(
    page: Page, platform: Platform, tmp_path: Path
) -> None:
    job_id = submit_steady(platform, tmp_path, "holds-a-cpu", steps=100_000, step_s=0.2)
    platform.wait_for(job_id, "RUNNING", lambda s: s["job"]["state"] == "RUNNING", STATE_S / 1000)
    sign_in(page, platform.url, platform.token)
    page.get_by_role("link", name="Cluster").click()

    expect(page.locator("[data-page=cluster]")).to_be_visible()
    node = page.locator("table[aria-label=Nodes] tbody tr")
    expect(node).to_have_count(1)
    # the steady job's one learner asks for a tenth of a CPU and 256 MiB
    expect(node.locator("td").nth(4)).not_to_have_text("0")
    expect(node.locator("td").nth(1)).not_to_have_text(re.compile(r"^0 /"))
    expect(page.get_by_role("heading", name=re.compile(r"Queue \(\d+\+?\)"))).to_be_visible()
    assert_accessible(page)
    platform.dlaas("delete", job_id)


def test_a_manifest_and_a_model_archive_dropped_on_the_page_are_submitted(
    page: Page, platform: Platform, tmp_path: Path
) -> None:
    sign_in(page, platform.url, platform.token)
    page.goto(f"{platform.url}/ui/jobs/new")
    expect(page.locator("[data-page=submit] .drop")).to_be_visible()
    manifest = steady_manifest(tmp_path, "dropped", steps=3, step_s=0.01).read_text()
    archive = zip_directory(STEADY_JOB, tmp_path).read_bytes()
    page.evaluate(
        """([manifest, archive]) => {
             const drop = new DataTransfer();
             drop.items.add(new File([manifest], "manifest.yml", {type: "text/yaml"}));
             drop.items.add(new File([new Uint8Array(archive)], "model.zip",
                                     {type: "application/zip"}));
             document.querySelector(".drop").dispatchEvent(
               new DragEvent("drop", {dataTransfer: drop, bubbles: true, cancelable: true}));
           }""",
        [manifest, list(archive)],
    )
    expect(page.locator(".chosen")).to_have_text(
        "Chosen: manifest manifest.yml, model archive model.zip"
    )
    page.get_by_role("button", name="Submit job").click()

    expect(page.locator("[data-page=job]")).to_be_visible(timeout=60_000)
    expect(page.locator("h1")).to_have_text("dropped")
    expect(page.locator(".job-head")).to_have_attribute("data-state", "COMPLETED", timeout=STATE_S)
    expect(page.locator("pre.log")).to_contain_text("steady: done")


def test_a_warning_the_api_gives_of_a_submitted_manifest_is_shown(
    page: Page, platform: Platform, tmp_path: Path
) -> None:
    sign_in(page, platform.url, platform.token)
    page.goto(f"{platform.url}/ui/jobs/new")
    manifest = steady_manifest(tmp_path, "warned", steps=1, step_s=0.01)
    manifest.write_text(manifest.read_text() + "remarks: kept but unread\n")
    archive = zip_directory(STEADY_JOB, tmp_path)
    page.locator("#manifest").set_input_files(str(manifest))
    page.locator("#model-zip").set_input_files(str(archive))
    page.get_by_role("button", name="Submit job").click()
    warning = page.locator("[data-warnings]")
    expect(warning).to_contain_text("remarks is not a manifest field", timeout=60_000)
    warning.get_by_role("link", name="Open the job").click()
    expect(page.locator("h1")).to_have_text("warned")


@pytest.mark.parametrize("path", ["/ui/", "/ui/jobs/new", "/ui/compare", "/ui/cluster"])
def test_every_page_is_usable_by_keyboard_with_every_control_labelled(
    page: Page, platform: Platform, path: str
) -> None:
    sign_in(page, platform.url, platform.token)
    page.goto(f"{platform.url}{path}")
    expect(page.locator("main[data-page]")).not_to_have_attribute("data-page", "")
    page.keyboard.press("Tab")  # the skip link comes first
    expect(page.locator(".skip")).to_be_focused()
    assert_accessible(page)


def test_a_restart_is_drawn_on_the_timeline_with_its_cause_and_the_work_lost(
    page: Page, platform: Platform, tmp_path: Path
) -> None:
    job_id = submit_steady(platform, tmp_path, "restarts-once", steps=30, step_s=0.05, fail_at=20)
    platform.wait_for(
        job_id, "COMPLETED", lambda s: s["job"]["state"] == "COMPLETED", STATE_S / 1000
    )
    sign_in(page, platform.url, platform.token)
    page.goto(f"{platform.url}/ui/jobs/{job_id}")

    restart = page.locator("ul.restarts li")
    expect(restart).to_have_count(1, timeout=30_000)
    expect(restart).to_contain_text("learner 1")
    expect(restart).to_contain_text("exited with code 3")
    expect(restart).to_contain_text("Started over (no checkpoint yet)")
    # 20 steps of 50 ms ran before the failure, and no checkpoint kept them
    lost = re.search(r"work lost ([0-9.]+)s", restart.inner_text())
    assert lost and float(lost.group(1)) >= 0.9, restart.inner_text()
    expect(page.locator("svg.timeline .mark")).to_have_count(1)
    expect(page.locator("svg.timeline rect.state-recovering")).to_have_count(1)
    expect(page.locator("dl.facts")).to_contain_text("Restarts1")


def test_the_jobs_list_shows_a_new_job_without_a_reload_and_the_log_is_searched_and_saved(
    page: Page, platform: Platform, tmp_path: Path
) -> None:
    sign_in(page, platform.url, platform.token)
    expect(page.locator("table.jobs[data-loaded]")).to_be_visible()
    page.evaluate("window.notReloaded = true")
    job_id = submit_steady(platform, tmp_path, "appears-live", steps=30, step_s=0.02)
    row = page.locator(f"tr[data-job='{job_id}']")
    expect(row).to_be_visible(timeout=30_000)
    expect(row).to_have_attribute("data-state", "COMPLETED", timeout=STATE_S)
    assert page.evaluate("window.notReloaded") is True

    row.get_by_role("link", name="appears-live").click()
    expect(page.locator("pre.log")).to_contain_text("steady: done", timeout=STATE_S)
    page.fill("#log-search", "step 2")
    # "step 2" and "step 20" .. "step 29"
    expect(page.locator("pre.log .line")).to_have_count(11)
    expect(page.locator("pre.log")).not_to_contain_text("steady: done")
    with page.expect_download() as saved:
        page.get_by_role("button", name="Download log").click()
    text = Path(saved.value.path()).read_text()
    assert "steady: done" in text and text.count("\nstep ") >= 29


def test_an_elastic_jobs_page_shows_the_learners_it_runs_at_and_its_range(
    page: Page, platform: Platform, tmp_path: Path
) -> None:
    manifest = steady_manifest(tmp_path, "elastic-page", steps=1, step_s=0.01)
    text = manifest.read_text().replace("learners: 1\n", "learners: 2\n")
    manifest.write_text(text + "elastic: {min_learners: 1, max_learners: 3}\n")
    archive = zip_directory(STEADY_JOB, tmp_path)
    with platform.client() as client:
        job_id = str(client.submit_job(manifest, archive)["id"])
        learners = client.get_job(job_id)["learners"]
    sign_in(page, platform.url, platform.token)
    page.goto(f"{platform.url}/ui/jobs/{job_id}")
    fact = page.locator("dl.facts dt", has_text="Learners").locator(
        "xpath=following-sibling::dd[1]"
    )
    expect(fact).to_have_text(f"{learners} (elastic, 1 to 3)", timeout=30_000)


def test_a_failed_job_says_why_in_the_jobs_list(
    page: Page, platform: Platform, tmp_path: Path
) -> None:
    manifest = tmp_path / "fails.yml"
    manifest.write_text(
        "name: fails-listed\ncpus: 0.1\nmemory: 256Mi\nrestart_policy: {max_restarts: 0}\n"
        "framework:\n  name: python\n  command: python -c 'import sys; sys.exit(3)'\n"
    )
    archive = zip_directory(STEADY_JOB, tmp_path)
    with platform.client() as client:
        job_id = str(client.submit_job(manifest, archive)["id"])
    failed = platform.wait_for(job_id, "FAILED", lambda s: s["job"]["state"] == "FAILED", 240)
    reason = failed["job"]["reason"]
    assert reason
    sign_in(page, platform.url, platform.token)
    page.goto(f"{platform.url}/ui/")
    expect(page.locator(f"tr[data-job='{job_id}'] .reason")).to_have_text(reason, timeout=30_000)
