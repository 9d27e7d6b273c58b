"""UpdateThreads: the PPO update's torch thread count on CPU, chosen by measuring updates."""

import torch

from mjfleet.launch.devices import GpuRequest, make_plan, usable_cores
from mjfleet.rl import FleetRunner
from mjfleet.rl.update_threads import MIN_MINIBATCH_FLOP, UpdateThreads
from mjfleet.tasks import get_task


def _run(chooser: UpdateThreads, seconds_with) -> list[int]:
    """Feed `n` updates whose duration depends on (update index, thread count); the thread counts chosen."""
    chosen = []
    for i in range(40):
        threads = chooser.choose()
        chosen.append(threads)
        chooser.record(threads, seconds_with(i, threads))
    return chosen


def test_the_faster_thread_count_is_kept_after_one_warm_up_and_one_measured_update_each():
    chooser = UpdateThreads(available=2, base=1, probe_every=8)
    chosen = _run(chooser, lambda i, t: 1.0 if t == 1 else 0.6)
    assert chosen[:4] == [1, 2, 2, 1]  # warm-ups, then one measured update with each count
    assert chosen[4:12] == [2] * 8
    assert chosen.count(1) <= 4 + 3  # probes of the slower count become rarer (8, 16, 32 updates apart)


def test_a_thread_count_that_loses_is_not_kept():
    chosen = _run(UpdateThreads(available=2, base=1), lambda i, t: 1.0 if t == 1 else 3.0)
    assert chosen[4:].count(2) <= 3 and chosen[-1] == 1


def test_a_slowdown_of_the_count_in_use_switches_at_once_and_a_recovery_is_found_by_probing():
    # Two threads win until update 20, when another process takes the second core (they become 4x slower),
    # and win again from update 30 on.
    def seconds(i, t):
        if t == 1:
            return 1.0
        return 2.4 if 20 <= i < 30 else 0.6

    chooser = UpdateThreads(available=2, base=1, probe_every=4, max_probe_every=8)
    chosen = _run(chooser, seconds)
    assert chosen[19] == 2 and chosen[20] == 2  # the slow update is noticed after it ran ...
    assert chosen[21] == 1 and chosen[22:24] == [1, 1]  # ... and the next one is on one thread
    assert chosen[-1] == 2 and 2 in chosen[30 : 34 + 8]  # probing finds the idle core again


def test_a_lasting_slowdown_of_both_counts_does_not_make_every_other_update_a_probe():
    # From update 10 on, one thread takes twice as long as before, and two threads lose all along.
    chosen = _run(
        UpdateThreads(available=2, base=1), lambda i, t: 3.0 if t == 2 else (1.0 if i < 10 else 2.0)
    )
    assert chosen[10:].count(2) <= 2


def test_small_minibatches_and_explicit_thread_counts_are_not_adapted():
    small = UpdateThreads.for_update(available=2, minibatch_size=384, num_parameters=9_000)
    assert not small.adaptive  # 21 MFLOP per minibatch
    big = UpdateThreads.for_update(available=2, minibatch_size=1536, num_parameters=380_000)
    assert big.adaptive and 6 * 1536 * 380_000 >= MIN_MINIBATCH_FLOP
    assert not UpdateThreads.for_update(available=1, minibatch_size=1536, num_parameters=380_000).adaptive
    assert not UpdateThreads(available=3, base=3).adaptive


def test_plan_gives_the_update_the_cores_the_cpu_workers_leave():
    cores = usable_cores()
    one = make_plan(GpuRequest("cpu"), cpu_workers=1)
    assert one.threads_per_worker == 1 and one.update_threads == max(1, cores)
    assert make_plan(GpuRequest("cpu"), cpu_workers=2).update_threads == max(1, cores // 2)
    fixed = make_plan(GpuRequest("cpu"), cpu_workers=1, threads=3)
    assert fixed.threads_per_worker == fixed.update_threads == 3


def test_runner_updates_on_the_chosen_thread_count_and_collects_on_one(tmp_path):
    spec = get_task("Cartpole-Balance")
    env_cfg = spec.env_config()
    env_cfg.num_envs = 64
    agent = spec.agent_config()
    agent.num_steps_per_env = 8  # minibatches of 128 samples
    agent.logger = "none"
    agent.actor.hidden_dims = agent.critic.hidden_dims = (384, 384)  # ~300k parameters: > 100 MFLOP
    threads_seen = []
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        runner = FleetRunner(spec.make_env(env_cfg), agent, None, "cpu", update_threads=2)
        assert runner.update_threads.adaptive
        update = runner.alg.update

        def spy(obs):
            threads_seen.append(torch.get_num_threads())
            return update(obs)

        runner.alg.update = spy
        record = runner.learn(5)
        assert torch.get_num_threads() == 1  # the collection's count is restored after every update
    finally:
        torch.set_num_threads(previous)
    history = runner.update_threads.history
    assert threads_seen == [t for t, _ in history][: len(threads_seen)] and len(history) == 5
    assert threads_seen[:4] == [1, 2, 2, 1]
    measured = dict(history[2:4])  # the opening's measured update with each count: the fifth takes the faster
    assert threads_seen[4] == min(measured, key=measured.__getitem__)
    assert record["Perf/update_threads"] == threads_seen[-1]


def test_the_opening_is_four_updates_when_both_counts_are_tried_and_none_otherwise():
    """bench leaves these updates untimed (the first choice is made after them)."""
    adaptive, pinned = UpdateThreads(available=2), UpdateThreads(available=1)
    assert adaptive.opening_updates == 4 and pinned.opening_updates == 0
    for _ in range(adaptive.opening_updates):
        with adaptive.applied():
            pass
    assert adaptive._next_probe is not None  # the first choice has been made
