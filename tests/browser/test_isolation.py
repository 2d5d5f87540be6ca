"""Another user's jobs appear nowhere in the dashboard: not listed, not opened, not
compared, not queued."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from tests.browser.dashboard import sign_in
from tests.browser.jobs import submit_steady
from tests.platform import Platform


def test_a_user_sees_none_of_another_users_jobs(
    page: Page, platform: Platform, tmp_path: Path
) -> None:
    alice = platform.create_user("alice-ui")
    bob = platform.create_user("bob-ui")
    bobs = submit_steady(platform, tmp_path, "bobs-secret", token=bob.token, steps=5, step_s=0.01)
    alices = submit_steady(platform, tmp_path, "alices-own", token=alice.token, steps=5)

    sign_in(page, platform.url, alice.token)
    expect(page.locator("#who-name")).to_have_text("alice-ui")
    expect(page.locator(f"tr[data-job='{alices}']")).to_be_visible()
    expect(page.locator(f"tr[data-job='{bobs}']")).to_have_count(0)
    expect(page.locator("table.jobs")).not_to_contain_text("bobs-secret")

    page.fill("#filter-name", "bobs-secret")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("td.empty")).to_have_text("No jobs match.")

    page.goto(f"{platform.url}/ui/jobs/{bobs}")
    expect(page.locator("[role=alert]")).to_contain_text(bobs)
    expect(page.locator("main")).not_to_contain_text("bobs-secret")
    expect(page.locator("pre.log")).to_have_count(0)

    page.goto(f"{platform.url}/ui/compare?jobs={alices},{bobs}")
    expect(page.locator("[role=alert]")).to_contain_text(bobs)
    expect(page.locator("ul.legend")).not_to_contain_text("bobs-secret")

    page.goto(f"{platform.url}/ui/cluster")
    expect(page.locator("[data-page=cluster]")).to_be_visible()
    expect(page.locator("main")).not_to_contain_text("bobs-secret")
