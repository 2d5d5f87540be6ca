"""Which rate-limit buckets a request draws from: a job's token on the object gateway only
its own job bucket (learners of many jobs share one address); everything else its
credentials' and its address's."""

from __future__ import annotations

from starlette.types import Scope

from api.rate_limit import Limit, buckets

USER, ADDRESS, JOB = Limit(20, 200), Limit(100, 1000), Limit(1000, 5000)


def scope(path: str, token: str | None) -> Scope:
    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    return {"type": "http", "path": path, "headers": headers, "client": ("10.0.0.7", 5555)}


def kinds(drawn: list[tuple[str, Limit]]) -> list[tuple[str, Limit]]:
    return [(key.split(":")[2], limit) for key, limit in drawn]


def test_a_job_token_on_the_gateway_draws_from_its_job_bucket_only() -> None:
    drawn = buckets(scope("/v2/job-objects/jobs/x/a", "dlaasjob_abc"), USER, ADDRESS, JOB)
    assert kinds(drawn) == [("job", JOB)]


def test_a_job_token_elsewhere_and_a_user_token_on_the_gateway_draw_as_users_do() -> None:
    for path, token in (("/v2/jobs", "dlaasjob_abc"), ("/v2/job-objects", "dlaas_user")):
        drawn = buckets(scope(path, token), USER, ADDRESS, JOB)
        assert kinds(drawn) == [("token", USER), ("addr", ADDRESS)]


def test_job_limits_off_leave_the_gateway_unlimited_for_job_tokens() -> None:
    off = Limit(0, 0)
    assert buckets(scope("/v2/job-objects", "dlaasjob_abc"), USER, ADDRESS, off) == []
