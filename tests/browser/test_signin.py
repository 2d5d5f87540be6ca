"""Signing in to the dashboard: the form, the link `dlaas up` prints, and a wrong token."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from tests.browser.dashboard import assert_accessible, sign_in
from tests.platform import Platform

SIGNIN_FORM = "form[data-form=signin]"
TOKEN_INPUT = f"{SIGNIN_FORM} input[name=token]"


def test_without_a_token_the_page_asks_for_one_in_a_labelled_field(
    page: Page, platform: Platform
) -> None:
    page.goto(f"{platform.url}/ui/")

    expect(page.locator(SIGNIN_FORM)).to_be_visible()
    expect(page.locator(TOKEN_INPUT)).to_have_accessible_name(re.compile("token", re.I))
    expect(page.locator("[data-page=jobs]")).to_have_count(0)
    assert_accessible(page)


def test_the_sign_in_link_lands_on_the_jobs_page_and_drops_the_token_from_the_address(
    page: Page, platform: Platform
) -> None:
    sign_in(page, platform.url, platform.token)

    expect(page.locator("[data-page=jobs]")).to_be_visible()
    assert platform.token not in page.url
    assert_accessible(page)


def test_the_right_token_typed_into_the_form_signs_in(page: Page, platform: Platform) -> None:
    page.goto(f"{platform.url}/ui/")
    page.locator(TOKEN_INPUT).fill(platform.token)
    page.locator(TOKEN_INPUT).press("Enter")

    expect(page.locator("[data-page=jobs]")).to_be_visible()


def test_a_wrong_token_typed_into_the_form_is_refused_with_an_error_shown(
    page: Page, platform: Platform
) -> None:
    page.goto(f"{platform.url}/ui/")
    page.locator(TOKEN_INPUT).fill("dlaas_not-a-token-anyone-has")
    page.locator(f"{SIGNIN_FORM} [type=submit]").click()

    alert = page.locator("[role=alert]")
    expect(alert).to_be_visible()
    expect(alert).to_have_text(re.compile("does not know this token"))
    expect(page.locator(SIGNIN_FORM)).to_be_visible()
    # signed out, the page offers nothing but the form
    expect(page.locator("#nav")).to_be_hidden()
    expect(page.get_by_role("button", name="Sign out")).to_be_hidden()
    expect(page.locator("[data-page=jobs]")).to_have_count(0)


def test_signing_out_forgets_the_token(page: Page, platform: Platform) -> None:
    sign_in(page, platform.url, platform.token)
    page.get_by_role("button", name="Sign out").click()

    expect(page.locator(SIGNIN_FORM)).to_be_visible()
    assert page.evaluate("() => localStorage.length") == 0
    page.goto(f"{platform.url}/ui/cluster")
    expect(page.locator(SIGNIN_FORM)).to_be_visible()


def test_a_token_revoked_while_a_page_is_open_signs_the_user_out_name_and_all(
    page: Page, platform: Platform
) -> None:
    user = platform.create_user("revoked-in-view")
    sign_in(page, platform.url, user.token)
    expect(page.locator("#who-name")).to_have_text("revoked-in-view")
    with platform.client() as admin:
        for made in admin.tokens(user=user.name):
            admin.revoke_token(str(made["id"]), user=user.name)
    # the jobs page asks the API again within seconds, and is answered 401
    expect(page.locator("[role=alert]")).to_have_text(
        re.compile("no longer accepted"), timeout=30_000
    )
    expect(page.locator("#who-name")).to_have_text("")
    expect(page.locator("#who")).to_be_hidden()
    expect(page.locator("#nav")).to_be_hidden()
