"""Which Redis users of jobs should exist, and what a job's user may do."""

from __future__ import annotations

import pytest

from storage import streams
from storage.job_redis_users import AccessPlan, acl_rules, learner_url, plan_access, user_name


@pytest.mark.parametrize(
    ("platform", "learner"),
    [
        ("redis://:pw@redis:6379/0", "redis://dlaas-job-j1:tok@redis:6379/0"),
        ("redis://127.0.0.1:6379/3", "redis://dlaas-job-j1:tok@127.0.0.1:6379/3"),
        (
            "rediss://admin:pw@r.example:6380/1?ssl_cert_reqs=required",
            "rediss://dlaas-job-j1:tok@r.example:6380/1?ssl_cert_reqs=required",
        ),
    ],
)
def test_the_learners_url_carries_the_jobs_user_and_token_only(platform: str, learner: str) -> None:
    assert learner_url(platform, "j1", "tok") == learner
    assert "pw" not in learner_url(platform, "j1", "tok")


def test_a_token_is_quoted_in_the_url() -> None:
    assert (
        learner_url("redis://r:1/0", "j1", "a/b:c@d") == "redis://dlaas-job-j1:a%2Fb%3Ac%40d@r:1/0"
    )


def test_a_jobs_user_has_its_own_keys_and_the_runners_commands_only() -> None:
    rules = acl_rules("j1", ["ab" * 32])
    assert rules[:2] == ["on", "#" + "ab" * 32]
    keys = [rule[1:] for rule in rules if rule.startswith("~")]
    assert keys == list(streams.job_keys("j1"))
    assert all(key.startswith("dlaas:job:j1:") for key in keys)
    # every command is taken away first, then the few the runner sends given back
    granted = rules[rules.index("-@all") + 1 :]
    assert granted and all(rule.startswith("+") for rule in granted)
    assert not {"+eval", "+lpush", "+keys", "+del", "+config", "+acl"} & set(granted)
    assert rules.index("resetkeys") < rules.index(f"~{keys[0]}")
    assert user_name("j1") == "dlaas-job-j1"


def test_live_jobs_without_a_user_are_granted_with_every_live_token() -> None:
    plan = plan_access({"j1": ["h1", "h2"], "j2": ["h3"]}, {"j2"}, {"j2": 0})
    assert plan == AccessPlan(grant={"j1": ("h1", "h2")}, revoke=())


def test_a_live_job_missing_from_the_relayed_set_is_granted_again() -> None:
    """Redis lost the set (flushed) but kept the user: the relay must hear of it again."""
    assert plan_access({"j1": ["h1"]}, {"j1"}, {}).grant == {"j1": ("h1",)}
    assert plan_access({"j1": ["h1"]}, {"j1"}, {"j1": 1000.0}).grant == {"j1": ("h1",)}


def test_only_this_platforms_granted_users_that_are_not_live_are_revoked() -> None:
    relayed = {"stopped": 0.0, "revoked-already": 1000.0, "live": 0.0}
    users = {"stopped", "live", "another-platforms-job"}
    plan = plan_access({"live": ["h"]}, users, relayed)
    assert plan == AccessPlan(grant={}, revoke=("stopped",))
    assert not plan_access({"live": ["h"]}, {"live"}, {"live": 0.0})
