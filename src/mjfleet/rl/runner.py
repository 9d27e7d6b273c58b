"""mjfleet's training loop: rsl_rl's algorithm and models, any backend, on-device statistics, rank-0 outputs."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from mjfleet.errors import UsageError, first_line
from mjfleet.fleet import liveness
from mjfleet.fleet.agreement import agreed_stop, check_consistency
from mjfleet.fleet.context import WorkerContext
from mjfleet.rl import saved_state
from mjfleet.rl.algorithm import Algorithm, build_algorithm, load_checkpoint_state
from mjfleet.rl.config import AgentConfig
from mjfleet.rl.episode_stats import EpisodeStats
from mjfleet.rl.stop import StopRequest
from mjfleet.rl.update_threads import UpdateThreads
from mjfleet.runs.console import IterationConsole
from mjfleet.runs.metrics import MetricsWriter
from mjfleet.runs.run_dir import RunDir, to_plain


class VideoHook(Protocol):
    """Frames drawn from the training rollout (`mjfleet.runs.video.TrainingVideo`)."""

    def begin_iteration(self, iteration: int) -> None: ...

    def step(self) -> None: ...

    def take_finished(self) -> list[tuple[pathlib.Path, int]]: ...

    def close(self) -> None: ...


@dataclass
class RunnerHooks:
    """What a job adds to training, called by the runner at fixed points; each optional."""

    on_iteration: Callable[[dict[str, Any]], None] | None = None
    """Every rank, with every iteration's record (`bench` reads its timings there)."""
    evaluate: Callable[[FleetRunner, int], dict[str, Any]] | None = None
    """Rank 0, after each iteration (with the number of iterations done): entries to add to the record (Eval/*),
    or an empty dict. No collective inside: the other ranks simply wait at their next one."""
    video: VideoHook | None = None
    """Rank 0: told of every iteration's start and every rollout step; finished videos are logged."""
    on_checkpoint: Callable[[pathlib.Path, int], None] | None = None
    """Rank 0, after each numbered checkpoint is written (path, iteration): pruning, export, upload."""
    save_point: Callable[[int], bool] | None = None
    """Whether to save after this many iterations besides every `save_interval` (milestones kept for ever)."""
    on_step: Callable[[], None] | None = None
    """Rank 0, after every rollout step (`train --viewer viser`); it must not wait on the device."""
    on_close: Callable[[], None] | None = None
    """Once, when the runner closes (the live view ends)."""


class FleetRunner:
    """Trains the algorithm `agent_cfg.algorithm_name` names (PPO, SAC: an `mjfleet.rl.algorithm.Algorithm`, known
    only through that contract) on one vectorised environment, as one worker of `context`.

    It runs the loop rsl_rl's `OnPolicyRunner` runs (collect, then the algorithm's update: PPO's epochs over the
    rollout, SAC's gradient steps on its replay buffer), with what a fleet needs:

    - The worker's place in the run comes as an explicit `WorkerContext` (rank, world size, device, process
      group; default: one worker on `device`): nothing here reads the environment or creates a process group.
      Parameters are broadcast from rank 0 at the start; gradients are averaged after every minibatch by the
      algorithm's averaged-gradient step (`mjfleet.rl.gradients`), whose reducer carries every other exchange.
    - Episode statistics are reduced on device and read once per iteration; throughput and counts are global.
    - Only rank 0 writes: metrics.jsonl, TensorBoard/wandb, checkpoints (`mjfleet.rl.saved_state`).
    - Checkpoints every `save_interval` iterations, at the hooks' extra save points and at the end; what happens
      to a written checkpoint (pruning, export, upload) is the job's (`RunnerHooks.on_checkpoint`). A checkpoint
      of another algorithm is refused with a usage error.
    - A `StopRequest` (SIGINT/SIGTERM) is checked once per iteration; all ranks agree on it
      (`mjfleet.fleet.agreement`), so they stop after the same iteration, save, and `learn` returns with
      `interrupted` set.
    - On CPU with `update_threads` > the torch threads the worker collects with, each update runs on either
      count, whichever measures faster (`mjfleet.rl.update_threads`).
    """

    def __init__(
        self,
        env,
        agent_cfg: AgentConfig,
        run_dir: RunDir | None = None,
        device: str | torch.device = "cpu",
        *,
        context: WorkerContext | None = None,
        hooks: RunnerHooks | None = None,
        stop: StopRequest | None = None,
        log_format: str = "block",
        update_threads: int = 1,
        checkpoint_info: dict[str, Any] | None = None,
    ) -> None:
        self.ctx = context if context is not None else WorkerContext.single(str(device))
        self.device = self.ctx.device
        self.env = env
        self.agent_cfg = agent_cfg
        self.run_dir = run_dir
        self.hooks = hooks if hooks is not None else RunnerHooks()
        self.stop = stop
        self.log_format = log_format
        obs = env.get_observations()
        self.alg: Algorithm = build_algorithm(obs, env, agent_cfg, self.ctx)
        self.current_learning_iteration = 0
        self.env_steps = 0
        self.metrics: MetricsWriter | None = None
        self.last_record: dict[str, Any] = {}
        self._stats: EpisodeStats | None = None
        self.last_checkpoint: pathlib.Path | None = None
        self.interrupted: int | None = None
        """The signal that stopped the last `learn` early (agreed by all ranks), else None."""
        self.saved_iteration: int | None = None
        self.checkpoint_info = {
            "observations": {k: int(v.shape[-1]) for k, v in obs.items()},
            "num_actions": int(env.num_actions),
            "step_dt": float(getattr(env, "step_dt", 0.0)) or None,
            **(checkpoint_info or {}),
        }
        """What a checkpoint's `infos` holds besides the world size: what rebuilding the policy needs."""
        on_cpu = torch.device(self.device).type == "cpu"
        self.update_threads = UpdateThreads.for_update(
            available=update_threads if on_cpu else 1,
            minibatch_size=self.alg.mini_batch_size,
            num_parameters=self.alg.gradients.num_parameters,
            base=torch.get_num_threads(),
        )

    def get_inference_policy(self):
        """The policy in eval mode: called on observations it returns the distribution's mean (rsl_rl's name)."""
        self.alg.eval_mode()
        return self.alg.get_policy()

    @property
    def reducer_name(self) -> str | None:
        """How gradients are averaged across workers (None: one worker)."""
        return self.alg.gradients.reducer_name

    def describe(self) -> str:
        """What runs, for the start-up line: the algorithm's update and how it averages across workers."""
        return self.alg.describe()

    # --------------------------------------------------------------- training
    def learn(self, num_learning_iterations: int, init_at_random_ep_len: bool = False) -> dict[str, Any]:
        """Train for `num_learning_iterations` more iterations; returns the last iteration's record."""
        env = self.env
        if init_at_random_ep_len:
            env.episode_length_buf = torch.randint_like(
                env.episode_length_buf, high=int(env.max_episode_length)
            )
        obs = env.get_observations().to(self.device)
        self.alg.train_mode()
        if self.ctx.is_distributed:
            self.alg.broadcast_parameters()
        if self.ctx.is_main and self.run_dir is not None and self.metrics is None:
            self.metrics = MetricsWriter(
                self.run_dir.path,
                self.agent_cfg.logger,
                self.agent_cfg.wandb_project,
                config=to_plain(dataclasses.asdict(self.agent_cfg)),
            )

        self.interrupted = None
        # Kept across learn() calls: episodes running when one call ends are counted in full by the next.
        if self._stats is None:
            self._stats = EpisodeStats(env.num_envs, self.device)
        stats = self._stats
        num_steps = self.agent_cfg.num_steps_per_env
        steps_per_iteration = num_steps * env.num_envs * self.ctx.world_size
        # Moving tensors between the env's device and the learner's costs a few microseconds per step even when
        # they are the same device (TensorDict.to): skipped then.
        same_device = torch.device(env.device) == torch.device(self.device)
        start_it = self.current_learning_iteration
        total_it = start_it + num_learning_iterations
        console = IterationConsole(start_it, total_it, steps_per_iteration, self.log_format)
        video, on_step = self.hooks.video, self.hooks.on_step
        # The environment's training clock (its penalty curriculum), when it has one.
        set_progress = getattr(env, "set_training_progress", None)
        envs_in_fleet = self.ctx.world_size * env.num_envs
        for it in range(start_it, total_it):
            t0 = time.perf_counter()
            liveness.beat(f"collecting iteration {it + 1}")
            progress = set_progress(self.env_steps // envs_in_fleet) if set_progress else {}
            if video is not None:
                video.begin_iteration(it)
            with torch.inference_mode():
                for _ in range(num_steps):
                    actions = self.alg.act(obs)
                    if same_device:
                        obs, rewards, dones, extras = env.step(actions)
                    else:
                        obs, rewards, dones, extras = env.step(actions.to(env.device))
                        obs, rewards, dones = (
                            obs.to(self.device),
                            rewards.to(self.device),
                            dones.to(self.device),
                        )
                    self.alg.process_env_step(obs, rewards, dones, extras)
                    stats.update(rewards, dones, extras)
                    if video is not None:
                        video.step()
                    if on_step is not None:
                        on_step()
            # the one host synchronisation of the rollout
            episode = stats.collect(self.alg.gradients.sum_across_workers)
            t1 = time.perf_counter()
            liveness.beat(f"updating iteration {it + 1}")
            with self.update_threads.applied():
                losses = self.alg.update(obs)
            t2 = time.perf_counter()
            liveness.warmed_up()

            self.current_learning_iteration = it + 1
            self.env_steps += steps_per_iteration
            interval = self.agent_cfg.consistency_check_interval
            if self.ctx.is_distributed and interval > 0 and (it + 1) % interval == 0:
                check_consistency(self.alg.consistency_tensors(), self.alg.gradients.reducer, it + 1)
            record = self._record(it, episode, losses, t1 - t0, t2 - t1, steps_per_iteration)
            record.update(progress)
            if self.hooks.evaluate is not None:
                record.update(self.hooks.evaluate(self, it + 1))
            self.last_record = record
            if self.hooks.on_iteration is not None:
                self.hooks.on_iteration(record)
            if self.ctx.is_main:
                console.show(record)
                if self.metrics is not None:
                    self.metrics.write(record, stats.recent)
                self._publish_videos(it)
            stop_signal = self.agreed_stop()
            if stop_signal or self.is_save_point(it + 1):
                self.save_checkpoint()
            if stop_signal:
                self.interrupted = stop_signal
                break

        if self.saved_iteration != self.current_learning_iteration:
            self.save_checkpoint()
        return self.last_record

    def _record(self, it, episode, losses, collect_time, learn_time, steps) -> dict[str, Any]:
        record: dict[str, Any] = {
            "iteration": it,
            "env_steps": self.env_steps,
            "env_steps_per_s": steps / (collect_time + learn_time),
            "mean_return": episode.pop("mean_return"),
            "mean_episode_length": episode.pop("mean_episode_length"),
            "episodes": int(episode.pop("episodes")),
            "collect_time": collect_time,
            "learn_time": learn_time,
            **self.alg.record(),
        }
        record.update({f"Loss/{k}": v for k, v in losses.items()})
        if self.update_threads.adaptive:
            record["Perf/update_threads"] = self.update_threads.history[-1][0]
        record.update(episode)
        return record

    def _publish_videos(self, iteration: int) -> None:
        """Name the videos finished so far on the console, and show them on wandb (at `iteration`)."""
        if self.hooks.video is None:
            return
        for path, _ in self.hooks.video.take_finished():
            print(f"video: {path}", flush=True)
            if self.metrics is not None:
                self.metrics.log_video(path, iteration)

    def close(self) -> None:
        if self.hooks.video is not None:
            self.hooks.video.close()  # a recording cut short by the end of training keeps its frames
            self._publish_videos(self.current_learning_iteration - 1)
            self.hooks.video = None
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None
        if self.hooks.on_close is not None:
            self.hooks.on_close()

    # ------------------------------------------------------------- checkpoints
    def is_save_point(self, iteration: int) -> bool:
        """Whether a checkpoint is written after `iteration` (besides the end of training and a stop)."""
        if iteration % self.agent_cfg.save_interval == 0:
            return True
        return self.hooks.save_point is not None and self.hooks.save_point(iteration)

    def save_checkpoint(self) -> pathlib.Path | None:
        """Collective: write model_<iteration>.pt (rank 0, when it has a run directory), then the job's
        `on_checkpoint`. Every rank must call it at the same iteration."""
        rng_states = saved_state.gather_rng_states(self.alg.gradients.reducer, self.device, self.ctx.backend)
        self.saved_iteration = self.current_learning_iteration
        if not self.ctx.is_main or self.run_dir is None:
            return None
        path = self.run_dir.checkpoint(self.current_learning_iteration)
        with liveness.ticking(f"writing {path.name}"):  # the other ranks wait for it: not a hang
            self.save(path, rng_states=rng_states)
            self.last_checkpoint = path
            if self.hooks.on_checkpoint is not None:
                self.hooks.on_checkpoint(path, self.current_learning_iteration)
        return path

    def save(
        self, path: str | os.PathLike, infos: dict | None = None, rng_states: list | None = None
    ) -> None:
        """Write a checkpoint to `path` (`mjfleet.rl.saved_state`): the algorithm's name and state, the counts, the
        settings, `infos` beside `checkpoint_info`, and the RNG states (this rank's unless given)."""
        state = {"algorithm": self.alg.name, **self.alg.state_dict()}
        state["iter"] = self.current_learning_iteration
        state["env_steps"] = self.env_steps
        state["infos"] = {**self.checkpoint_info, "world_size": self.ctx.world_size, **(infos or {})}
        state["agent_cfg"] = to_plain(dataclasses.asdict(self.agent_cfg))
        state["rng_states"] = rng_states if rng_states is not None else [saved_state.rng_state(self.device)]
        saved_state.write(path, state)

    def load(self, path, strict: bool = True, map_location=None, restore_rng: bool = True) -> dict:
        """Restore the algorithm's state, the iteration and step counts, and this rank's torch RNG state when the
        checkpoint has one for it; returns its `infos`. A checkpoint of another algorithm is a UsageError, unless
        this one starts from it (`AlgorithmEntry.starts_from`: PPO from a distilled student), and so is one that
        does not fit this policy."""
        try:
            state = saved_state.read(path, map_location or self.device)
            load_checkpoint_state(self.alg, state, strict, source=path)
        except (RuntimeError, KeyError, ValueError) as exc:
            why = first_line(exc)
            raise UsageError(f"checkpoint {path} does not fit this task's policy: {why}") from None
        self.current_learning_iteration = state["iter"]
        self.env_steps = state.get("env_steps", 0)
        self.saved_iteration = self.current_learning_iteration
        rng_states = state.get("rng_states") or []
        if restore_rng and self.ctx.rank < len(rng_states):
            saved_state.set_rng_state(rng_states[self.ctx.rank], self.device)
        return state.get("infos") or {}

    def agreed_stop(self) -> int:
        """Collective: the signal that asked any rank to stop (0: none), the same on every rank."""
        local = (self.stop.signum or 0) if self.stop is not None else 0
        ctx = self.ctx
        return agreed_stop(
            local, ctx.rank, ctx.world_size, self.device, self.alg.gradients.sum_across_workers
        )

    def policy_parameters(self):
        """What the consistency check compares across ranks: the algorithm's `consistency_tensors`."""
        return self.alg.consistency_tensors()
