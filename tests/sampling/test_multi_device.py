"""One caching decision per step for all devices of a parallel run: votes from real threads."""

from __future__ import annotations

import threading
import time

import pytest

from krea2_cachedit.adapters.sampling.multi_device import StepConsensus, conds_per_device


def vote_together(consensus: StepConsensus, step: int, votes: dict[str, bool]) -> dict[str, bool]:
    """Every device votes at once from its own thread, as ComfyUI's pool runs them; what each must do."""
    results: dict[str, bool] = {}
    start = threading.Barrier(len(votes))

    def device(label, cache):
        start.wait()
        results[label] = consensus.vote(step, label, cache)

    threads = [threading.Thread(target=device, args=item) for item in votes.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(results) == len(votes), "a device never got its answer"
    return results


def test_a_step_is_cached_on_every_device_or_on_none():
    consensus = StepConsensus(min_wait_s=5.0)
    assert vote_together(consensus, 0, {"cuda:0": False, "cuda:1": False}) == {"cuda:0": False, "cuda:1": False}
    for step in range(1, 30):
        assert vote_together(consensus, step, {"cuda:0": True, "cuda:1": True}) == {"cuda:0": True, "cuda:1": True}
    # One device whose residual changed too much: neither serves the step from the cache.
    assert vote_together(consensus, 30, {"cuda:0": True, "cuda:1": False}) == {"cuda:0": False, "cuda:1": False}
    assert consensus.overridden() == {30: {None: ["cuda:0"]}}
    assert consensus.timeouts() == {}


def vote_lists_together(consensus: StepConsensus, step: int, votes: dict[str, tuple[bool, bool]]) -> dict:
    """Each device votes on its two lists in loop order from its own thread (a call runs one list, then the next)."""
    results: dict[str, list[bool]] = {}
    start = threading.Barrier(len(votes))

    def device(label, per_list):
        start.wait()
        results[label] = [consensus.vote(step, label, cache, block_list)
                          for block_list, cache in zip(("double_blocks", "single_blocks"), per_list)]

    threads = [threading.Thread(target=device, args=item) for item in votes.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(results) == len(votes), "a device never got its answer"
    return {label: tuple(answer) for label, answer in results.items()}


def test_each_block_list_is_decided_for_every_device_apart_from_the_other_lists():
    consensus = StepConsensus(min_wait_s=5.0)
    assert vote_lists_together(consensus, 0, {"a": (False, False), "b": (False, False)}) == {
        "a": (False, False), "b": (False, False)}
    # The double list: both say yes; the single list: "b" says no. Only the double list is cached, on both.
    assert vote_lists_together(consensus, 1, {"a": (True, True), "b": (True, False)}) == {
        "a": (True, False), "b": (True, False)}
    assert vote_lists_together(consensus, 2, {"a": (False, True), "b": (True, True)}) == {
        "a": (False, True), "b": (False, True)}
    assert consensus.overridden() == {1: {"single_blocks": ["a"]}, 2: {"double_blocks": ["b"]}}
    assert consensus.timeouts() == {}


def test_a_device_that_failed_after_its_first_list_is_not_waited_for_on_the_next():
    consensus = StepConsensus(min_wait_s=30.0)
    vote_lists_together(consensus, 0, {"a": (False, False), "b": (False, False)})
    assert vote_lists_together(consensus, 1, {"a": (True, True), "b": (True, True)}) == {
        "a": (True, True), "b": (True, True)}
    answer = {}
    early = threading.Thread(target=lambda: answer.setdefault("b", consensus.vote(2, "b", True, "double_blocks")))
    early.start()
    assert consensus.vote(2, "a", True, "double_blocks") is True
    early.join(timeout=5)
    consensus.withdraw(2, "b")                            # "b"'s call failed inside its double list
    started = time.monotonic()
    assert consensus.vote(2, "a", True, "single_blocks") is True
    assert time.monotonic() - started < 1 and answer == {"b": True}


def test_a_yes_waits_for_the_other_devices_vote():
    """"a" votes first and gets its answer only after "b" has voted: the order of the two events says so, whatever
    the threads' timing (a vote that returned at once would come first)."""
    consensus = StepConsensus(min_wait_s=30.0)
    vote_together(consensus, 0, {"a": False, "b": False})
    events, lock, voting = [], threading.Lock(), threading.Event()

    def early_vote():
        voting.set()
        answer = consensus.vote(1, "a", True)
        with lock:
            events.append(("a answered", answer))

    early = threading.Thread(target=early_vote)
    early.start()
    assert voting.wait(timeout=30)
    early.join(timeout=0.5)   # bounded: a vote that does not wait has answered by now
    with lock:
        events.append(("b votes", None))
    assert consensus.vote(1, "b", True) is True
    early.join(timeout=30)
    assert not early.is_alive()
    assert events == [("b votes", None), ("a answered", True)], "'a' must wait for 'b', who voted in the step before"


def test_a_further_stream_of_a_device_follows_the_steps_decision():
    consensus = StepConsensus(min_wait_s=5.0)
    vote_together(consensus, 0, {"a": False, "b": False})
    assert vote_together(consensus, 1, {"a": True, "b": False}) == {"a": False, "b": False}
    assert consensus.vote(1, "a", True) is False          # a's second stream in step 1
    assert vote_together(consensus, 2, {"a": True, "b": True}) == {"a": True, "b": True}
    assert consensus.vote(2, "a", False) is False         # it may still compute on its own


def test_a_device_that_gets_no_work_is_waited_for_once_and_the_step_computes():
    consensus = StepConsensus(min_wait_s=0.3)
    vote_together(consensus, 0, {"a": False, "b": False})
    started = time.monotonic()
    assert consensus.vote(1, "a", True) is False          # "b" got no work in step 1
    assert 0.3 <= time.monotonic() - started < 5
    assert consensus.timeouts() == {1: ["b"]}
    started = time.monotonic()
    assert consensus.vote(2, "a", True) is True           # "b" is not waited for again
    assert time.monotonic() - started < 0.3


def test_a_device_whose_call_failed_before_voting_is_not_waited_for():
    consensus = StepConsensus(min_wait_s=30.0)
    vote_together(consensus, 0, {"a": False, "b": False})
    consensus.withdraw(1, "b")
    started = time.monotonic()
    assert consensus.vote(1, "a", True) is True
    assert time.monotonic() - started < 1


@pytest.mark.parametrize("total, devices, shares", [
    (2, 2, [1, 1]), (1, 2, [1, 0]), (3, 2, [2, 1]), (2, 3, [1, 1, 0]), (4, 3, [2, 2, 0]), (1, 1, [1]),
])
def test_conds_per_device_fills_devices_in_order(total, devices, shares):
    assert conds_per_device(total, devices) == shares
