"""What a training job adds to its runner (rank 0's): what follows each save (pruning, export, upload), the periodic
evaluation (model_best.pt), the training video and the live view. The checkpoint's contents and RNG states are
`mjfleet.rl.saved_state`'s."""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable
from typing import Any

import torch

from mjfleet.ranking import RULE, RankKey, ended_early, rank_key
from mjfleet.rl.runner import FleetRunner, RunnerHooks
from mjfleet.runs import Retention, RunDir


class JobHooks:
    """The job's `RunnerHooks` for the worker `ctx` (every rank: the retention's milestones; rank 0: after-save,
    video, live view, evaluation), and what they need once the runner exists (`attach`)."""

    def __init__(self, job, ctx, spec, env) -> None:
        self.runner_hooks = RunnerHooks(save_point=job.retention.is_milestone)
        self.after_save: AfterSave | None = None
        if not ctx.is_main:
            return
        hooks = self.runner_hooks
        hooks.on_checkpoint = self.after_save = AfterSave(
            job.run_dir, job.retention, job.export_on_save, job.wandb_upload_checkpoints
        )
        if job.video is not None:
            from mjfleet.runs.video import TrainingVideo

            interval, length, width, height = job.video
            hooks.video = TrainingVideo(env, job.run_dir.path / "videos", interval, length, width, height)
        if job.viewer is not None:
            from mjfleet.viewers.scene import open_training_viewer

            view = open_training_viewer(job.viewer, env, job.task)
            hooks.on_step, hooks.on_close = view.step, view.close
        if job.eval_interval > 0:
            from mjfleet.evaluation import on_own_envs

            cfg = dataclasses.replace(job.env, num_envs=min(job.eval_episodes, 64))
            evaluator = on_own_envs(lambda: spec.make_env(cfg, ctx.device), ctx.device, job.eval_episodes)
            hooks.evaluate = PeriodicEvaluation(evaluator, job.eval_interval, job.run_dir)

    def attach(self, runner: FleetRunner) -> None:
        if self.after_save is not None:
            self.after_save.runner = runner


class AfterSave:
    """Rank 0's `on_checkpoint`: prune old checkpoints, export the policy, upload the checkpoint, as asked."""

    def __init__(
        self, run_dir: RunDir, retention: Retention, export: bool = False, upload: bool = False
    ) -> None:
        self.run_dir, self.retention, self.export, self.upload = run_dir, retention, export, upload
        self.runner: FleetRunner | None = None
        """Set once the runner exists (it is built with these hooks)."""

    def __call__(self, path: pathlib.Path, iteration: int) -> None:
        runner = self.runner
        assert runner is not None
        self.retention.prune(self.run_dir.path)
        if self.export:
            export_policy(runner, self.run_dir, path)
        if self.upload and runner.metrics is not None:
            runner.metrics.upload_checkpoint(path, iteration)
            files = runner.metrics.wandb_files
            if files is not None:
                self.retention.prune(files)


def export_policy(runner: FleetRunner, run_dir: RunDir, checkpoint: pathlib.Path) -> None:
    """Export the current policy to <run_dir>/exported; a failed export is reported, training goes on."""
    from mjfleet.deploy.export import export_policy as export
    from mjfleet.deploy.export import policy_metadata

    actor = runner.alg.get_policy()
    obs = runner.env.get_observations().to(runner.device)
    was_training = actor.training
    actor.eval()
    iteration = runner.current_learning_iteration
    try:
        meta = policy_metadata(
            runner.env,
            actor,
            obs,
            runner.checkpoint_info.get("task", ""),
            iteration=iteration,
            checkpoint=str(checkpoint),
        )
        export(actor, obs, run_dir.exported_dir, meta)
    except Exception as exc:  # noqa: BLE001 - never lose a training run to an export problem
        print(f"error: policy export after iteration {iteration} failed: {exc}", flush=True)
    finally:
        actor.train(was_training)


CHOSEN_BY = (
    f"{RULE}; here nothing is passing (no threshold) and the objective is mean_return, higher is better"
)
"""How model_best.pt was chosen, as its infos["chosen_by"] says."""


class PeriodicEvaluation:
    """Rank 0's `evaluate` hook: every `interval` iterations, the deterministic policy on environments of its own
    (`evaluator`: policy -> `mjfleet.evaluation.evaluate`'s summary); the best so far is kept as model_best.pt,
    outside the checkpoint retention. Best is `mjfleet.ranking`'s rule: the share of episodes that ended early
    (falls) first, in steps of 5 points, then the mean return. Its random draws leave training's random stream as
    it was."""

    def __init__(
        self, evaluator: Callable[[Callable], dict[str, Any]], interval: int, run_dir: RunDir | None
    ) -> None:
        self.evaluator, self.interval, self.run_dir = evaluator, interval, run_dir
        self.best: RankKey | None = None
        """The rank key of the evaluation kept as model_best.pt."""

    def __call__(self, runner: FleetRunner, done: int) -> dict[str, Any]:
        if self.interval <= 0 or done % self.interval:
            return {}
        from mjfleet.fleet import liveness

        with liveness.ticking(f"evaluating after iteration {done}"):  # the other ranks wait: not a hang
            return self._evaluate(runner, done)

    def _evaluate(self, runner: FleetRunner, done: int) -> dict[str, Any]:
        from mjfleet.evaluation import ActorPolicy

        actor = runner.alg.get_policy()
        was_training = actor.training
        actor.eval()
        device = torch.device(runner.device)
        # A recurrent actor's hidden state belongs to the training rollout: evaluated from zero, then given back.
        rollout_state = actor.get_hidden_state() if getattr(actor, "is_recurrent", False) else None
        try:
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                result = self.evaluator(ActorPolicy(actor))
        finally:
            actor.train(was_training)
            if rollout_state is not None:
                actor.reset(hidden_state=rollout_state)
        mean_return = result["mean_return"]
        out = {"Eval/mean_return": mean_return, "Eval/mean_episode_length": result["mean_episode_length"]}
        out.update({f"Eval/{name}": value for name, value in result["metrics"].items()})
        early, ended = ended_early(result["terminations"])
        out["Eval/ended_early_share"] = early / ended if ended else None  # what model_best.pt compares first
        # No threshold to pass here: falls, then the return.
        key = rank_key(mean_return, "maximize", [(early, ended)])
        if mean_return is not None and (self.best is None or key < self.best):
            self.best = key
            if self.run_dir is not None:
                runner.save(
                    self.run_dir.path / "model_best.pt", infos={"eval": result, "chosen_by": CHOSEN_BY}
                )
        return out
