"""Which evaluated policy is best (`mjfleet.ranking`): passing first, then falling least (in steps of 5 points of
the early-ended share), then the objective; and the places that keep a best policy by it: train's model_best.pt
(`PeriodicEvaluation`) and scripts/time_to_threshold.py's `score` (--save-best). The sweep's ranking is in
tests/test_sweep.py.

The G1 case that made the rule: at iteration 100 a G1 fell in 64 of 64 episodes within 28 steps and, because
falling forward moves, had the lowest velocity error of its run; it was kept as best over later policies that
never fell. Summaries here are `mjfleet.evaluation.evaluate`'s own, run on a scripted stand-in for the simulator.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import SimpleNamespace

import pytest
import torch
from scripted_env import ScriptedEnv

from mjfleet.evaluation import early_terminations, evaluate
from mjfleet.ranking import FALLS_STEP_PERCENT, rank_key
from mjfleet.train.hooks import PeriodicEvaluation

ROOT = pathlib.Path(__file__).resolve().parents[1]
EPISODES = 64
ENVS = 16


def _time_to_threshold():
    """scripts/time_to_threshold.py as a module (a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location(
        "time_to_threshold", ROOT / "scripts" / "time_to_threshold.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("time_to_threshold", module)
    spec.loader.exec_module(module)
    return module


def _evaluation(fall_after: list[int | None], error: float, reward: float = 1.0) -> dict:
    """`evaluate`'s summary of 64 episodes on 16 scripted environments."""
    env = ScriptedEnv(fall_after, reward=reward, error=error)
    return evaluate(env, lambda obs: torch.zeros(ENVS, 1), EPISODES)


def g1_fell_every_episode() -> dict:
    """Evaluation A: every episode ends with a fall after 28 steps; the lower error (0.40), the higher return."""
    return _evaluation([28] * ENVS, error=0.40, reward=1.0)


def g1_never_fell() -> dict:
    """Evaluation B: no episode falls; the higher error (0.50), the lower return (100 steps x 0.1)."""
    return _evaluation([None] * ENVS, error=0.50, reward=0.1)


def test_the_scripted_g1_evaluations_are_what_the_case_says():
    a, b = g1_fell_every_episode(), g1_never_fell()
    assert early_terminations(a) == a["episodes_ended"] >= EPISODES and a["mean_episode_length"] == 28
    assert early_terminations(b) == 0 and b["terminations"]["time_out"] >= EPISODES
    assert a["metrics"]["lin_vel_error"] < b["metrics"]["lin_vel_error"]
    assert a["mean_return"] > b["mean_return"]  # what model_best.pt compared alone


# --- the rule ------------------------------------------------------------------------------------------------


def test_a_policy_that_fell_in_every_episode_ranks_below_one_that_never_fell_despite_its_lower_error():
    fell_all = rank_key(0.40, "minimize", [(64, 64)])
    never_fell = rank_key(0.50, "minimize", [(0, 64)])
    assert never_fell < fell_all


def test_a_passing_policy_ranks_first_even_when_it_falls_more():
    passing = rank_key(0.14, "minimize", [(3, 64)], passing=True)
    not_passing = rank_key(0.10, "minimize", [(0, 64)], passing=False)
    assert passing < not_passing


@pytest.mark.parametrize("direction", ["minimize", "maximize"])
def test_shares_more_than_a_step_apart_rank_the_one_that_falls_less_first_whatever_the_objective(direction):
    ended = 200
    for less in range(0, ended + 1, 3):
        for more in range(less, ended + 1, 7):
            if 100 * (more - less) <= FALLS_STEP_PERCENT * ended:
                continue  # within a step of each other: the objective may decide
            best, worst = (1e9, -1e9) if direction == "maximize" else (-1e9, 1e9)
            falls_less = rank_key(worst, direction, [(less, ended)])
            falls_more = rank_key(best, direction, [(more, ended)])
            assert falls_less < falls_more, (less, more)


@pytest.mark.parametrize(("direction", "better", "worse"), [("minimize", 0.2, 0.3), ("maximize", 30.0, 20.0)])
def test_within_a_step_of_falls_the_objective_decides_in_its_direction(direction, better, worse):
    assert rank_key(better, direction, [(2, 64)]) < rank_key(worse, direction, [(0, 64)])


def test_an_exact_step_edge_is_counted_in_integers_not_floats():
    # 15 % is three steps of 5; in floats 0.15 / 0.05 is 2.999..., one step too few
    assert rank_key(0.0, "minimize", [(15, 100)]).falls_step == 3
    assert rank_key(0.0, "minimize", [(3, 60)]).falls_step == 1


def test_the_worst_judges_falls_count():
    assert rank_key(0.5, "minimize", [(0, 64), (64, 64)]).falls_step == 100 // FALLS_STEP_PERCENT


def test_unknown_falls_rank_after_every_known_share():
    unknown = rank_key(0.0, "minimize", None)
    assert rank_key(9.0, "minimize", [(64, 64)]) < unknown
    assert rank_key(9.0, "minimize", [(0, 0)]) == rank_key(9.0, "minimize", None)  # nothing ended: unknown


def test_keeping_the_best_so_far_never_drifts_to_a_policy_that_falls_clearly_more():
    # Each falls 4 points more than the last with a better error: a pairwise "within 5 points" rule would keep
    # each in turn and end at 8 points more than the first; the steps stop at the first step's edge.
    best = None
    for falls, error in [(0, 0.5), (4, 0.4), (8, 0.3)]:
        key = rank_key(error, "minimize", [(falls, 100)])
        if best is None or key < best:
            best, kept = key, falls
    assert kept == 4


def test_no_value_ranks_last_within_its_step():
    assert rank_key(1e9, "minimize", [(0, 64)]) < rank_key(None, "minimize", [(0, 64)])
    assert rank_key(-1e9, "maximize", [(0, 64)]) < rank_key(float("nan"), "maximize", [(0, 64)])


# --- time_to_threshold --save-best ---------------------------------------------------------------------------

# Two judges, as the GPU stage has them: a fixed forward command and random commands, at most 5 % falls each.
THRESHOLDS = {"command": 0.15, "random": 0.25}


def test_time_to_threshold_keeps_the_g1_that_never_fell_on_the_command_over_the_one_that_fell_every_time():
    score = _time_to_threshold().score
    fell_all = {"command": g1_fell_every_episode(), "random": g1_fell_every_episode()}
    # B never falls under the forward command; on random commands two robots of 16 fall: neither A nor B is
    # within the fall limit of the random judge
    never_fell = {"command": g1_never_fell(), "random": _evaluation([50, 50] + [None] * 14, error=0.50)}
    a = score(fell_all, THRESHOLDS, "lin_vel_error", True, 0.05)
    b = score(never_fell, THRESHOLDS, "lin_vel_error", True, 0.05)
    assert a.failing and b.failing
    assert a.cost < b.cost  # A's error is the lower one ...
    assert b < a  # ... and B is kept


def test_time_to_threshold_passes_only_within_the_fall_limit_and_the_threshold_on_every_judge():
    score = _time_to_threshold().score
    good = _evaluation([None] * ENVS, error=0.10)
    assert not score({"command": good, "random": good}, THRESHOLDS, "lin_vel_error", True, 0.05).failing
    fell = _evaluation([28] * ENVS, error=0.10)
    assert score({"command": good, "random": fell}, THRESHOLDS, "lin_vel_error", True, 0.05).failing
    off = _evaluation([None] * ENVS, error=0.20)
    assert score({"command": off, "random": good}, THRESHOLDS, "lin_vel_error", True, 0.05).failing


# --- train's model_best.pt -----------------------------------------------------------------------------------


class _Actor(torch.nn.Module):
    def forward(self, obs, stochastic_output=False):
        return torch.zeros(obs.shape[0], 1)


class _Runner:
    """What PeriodicEvaluation uses of a FleetRunner: the policy, the device, and `save` (recorded here)."""

    def __init__(self) -> None:
        actor = _Actor()
        self.alg = SimpleNamespace(get_policy=lambda: actor)
        self.device = "cpu"
        self.saved: list[dict] = []

    def save(self, path, infos=None) -> None:
        self.saved.append({"path": path, **(infos or {})})


def _keep_best(tmp_path, envs: list[ScriptedEnv]) -> list[dict]:
    """Periodic evaluations every iteration, one on each env in turn; the saves of model_best.pt."""
    turn = iter(envs)
    hook = PeriodicEvaluation(
        lambda policy: evaluate(next(turn), policy, EPISODES), 1, SimpleNamespace(path=tmp_path)
    )
    runner = _Runner()
    for done in range(1, len(envs) + 1):
        hook(runner, done)
    return runner.saved


def _a() -> ScriptedEnv:
    return ScriptedEnv([28] * ENVS, reward=1.0, error=0.40)


def _b() -> ScriptedEnv:
    return ScriptedEnv([None] * ENVS, reward=0.1, error=0.50)


def test_model_best_keeps_the_policy_that_never_fell_when_the_one_that_fell_every_episode_came_first(
    tmp_path,
):
    saved = _keep_best(tmp_path, [_a(), _b()])
    assert len(saved) == 2 and saved[-1]["path"] == tmp_path / "model_best.pt"
    assert early_terminations(saved[-1]["eval"]) == 0


def test_model_best_keeps_the_policy_that_never_fell_when_it_came_first(tmp_path):
    saved = _keep_best(tmp_path, [_b(), _a()])
    assert len(saved) == 1  # A's higher return does not replace it
    assert early_terminations(saved[0]["eval"]) == 0


def test_model_best_records_the_rule_it_was_chosen_by(tmp_path):
    (saved,) = _keep_best(tmp_path, [_b()])
    assert "falls" in saved["chosen_by"] and "mean_return" in saved["chosen_by"]


def test_model_best_still_follows_the_return_among_policies_that_fall_alike(tmp_path):
    saved = _keep_best(tmp_path, [ScriptedEnv([None] * ENVS, reward=r) for r in (0.1, 0.3, 0.2)])
    assert [s["eval"]["mean_return"] for s in saved] == pytest.approx([10.0, 30.0])


class _SavingRunner:
    """What save_best uses of a FleetRunner: `save` (a minimal playable checkpoint) and the counts."""

    current_learning_iteration, env_steps = 100, 12800

    def save(self, path) -> None:
        torch.save({"algorithm": "ppo", "actor_state_dict": {}, "iter": 100, "infos": {}}, path)


def test_save_best_records_the_kept_policys_falls_and_the_rule_that_chose_it(tmp_path):
    import json

    from mjfleet.deploy.pretrained import PROVENANCE
    from mjfleet.ranking import RULE

    script = _time_to_threshold()
    results = {"command": g1_never_fell(), "random": _evaluation([50, 50] + [None] * 14, error=0.50)}
    key = script.score(results, THRESHOLDS, "lin_vel_error", True, 0.05)
    args = SimpleNamespace(
        task="Humanoid-Velocity-Flat", device="cpu", seed=1, episodes=EPISODES, eval_envs=ENVS,
        train_env=False, command=[0.5, 0.0, 0.0], metric="lin_vel_error", save_best=tmp_path,
    )  # fmt: skip
    script.save_best(args, _SavingRunner(), results, {}, 60.0, key)
    chosen = json.loads((tmp_path / PROVENANCE).read_text())["chosen_by"]
    assert chosen["rule"] == RULE and chosen["falls_step_percent"] == FALLS_STEP_PERCENT
    assert chosen["passing"] is False
    random_falls = results["random"]["terminations"]
    assert chosen["ended_early"] == {"command": [0, results["command"]["episodes_ended"]],
                                     "random": [random_falls["fell"], sum(random_falls.values())]}  # fmt: skip
    assert chosen["worst_ratio_to_threshold"] == pytest.approx(0.50 / 0.15)
