from lifecycle_manager.glue.learner_restarts import deploy_reason


def test_the_deploy_event_says_which_learners_are_created_again() -> None:
    assert deploy_reason(1, None, 2) == "creating learners"
    assert deploy_reason(3, None, 2) == "creating learners of attempt 3"
    assert deploy_reason(3, [1, 2], 2) == "creating learners of attempt 3"  # the whole gang
    assert deploy_reason(3, [2], 2) == "creating learner 2 again in attempt 3"
    assert deploy_reason(4, [1, 3], 3) == "creating learners 1, 3 again in attempt 4"
