"""mjfleet's training loop: rsl_rl's algorithm and models, any backend, on-device statistics, rank-0 outputs."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from mjfleet.rl.config import AgentConfig
from mjfleet.rl.episode_stats import EpisodeStats
from mjfleet.rl.ppo import FleetPPO
from mjfleet.rl.stop import StopRequest
from mjfleet.rl.update_threads import UpdateThreads
from mjfleet.runs.checkpoints import Retention
from mjfleet.runs.console import format_iteration
from mjfleet.runs.metrics import MetricsWriter
from mjfleet.runs.run_dir import RunDir, to_plain
from mjfleet.runs.video import TrainingVideo


class FleetRunner:
    """Trains an rsl_rl-style PPO (`FleetPPO`) on one vectorised environment, as one of one or many workers.

    It builds rsl_rl's models, storage and algorithm from the agent config (`PPO.construct_algorithm`) and runs the
    loop rsl_rl's `OnPolicyRunner` runs, with what a fleet needs:

    - Multi-process training on any backend: the process group (nccl on GPUs, gloo on CPU) comes from the launcher
      (or is created here from RANK/WORLD_SIZE); parameters are broadcast from rank 0 at the start and gradients
      are averaged after every minibatch by the algorithm's reducer (`mjfleet.rl.reduce`).
    - Episode statistics are reduced on device and read once per iteration; throughput and counts are global.
    - Only rank 0 writes: metrics.jsonl, TensorBoard/wandb, checkpoints (atomic; plain state dicts).
    - Checkpoints every `save_interval` iterations, at every `retention.keep_every` milestone and at the end;
      older ones are pruned by `retention`. Each holds every rank's torch RNG state, so a resumed run continues
      each rank's random stream.
    - A `StopRequest` (SIGINT/SIGTERM) is checked once per iteration; all ranks agree on it with one tiny sum, so
      they stop after the same iteration, save, and `learn` returns with `interrupted` set.
    - On CPU with `update_threads` > the torch threads the worker collects with, each PPO update runs on either
      count, whichever measures faster (`mjfleet.rl.update_threads`).
    """

    def __init__(
        self,
        env,
        agent_cfg: AgentConfig,
        run_dir: RunDir | None = None,
        device: str | torch.device = "cpu",
        *,
        extra_checkpoint_info: dict[str, Any] | None = None,
        log_format: str = "block",
        retention: Retention | None = None,
        stop: StopRequest | None = None,
        export_on_save: bool = False,
        upload_checkpoints: bool = False,
        update_threads: int = 1,
        on_iteration: Callable[[dict[str, Any]], None] | None = None,
        evaluator: Callable[[Callable], dict[str, Any]] | None = None,
        eval_interval: int = 0,
        video: TrainingVideo | None = None,
        on_step: Callable[[], None] | None = None,
    ) -> None:
        self.env = env
        self.on_step = on_step
        """Called after every rollout step on this rank (rank 0's `train --viewer viser`); it must not sync."""
        self.video = video
        """Rank 0's `train --video`: frames of env 0 drawn during the rollout, every few iterations."""
        self.on_iteration = on_iteration
        """Called with every iteration's record, on every rank (`bench` reads its timings there)."""
        self.evaluator = evaluator
        """Rank 0's periodic evaluation: called with the deterministic policy (observations -> actions) every
        `eval_interval` iterations, it returns `mjfleet.evaluation.evaluate`'s summary."""
        self.eval_interval = eval_interval
        self.best_eval_return: float | None = None
        self.agent_cfg = agent_cfg
        self.run_dir = run_dir
        self.device = str(device)
        self.log_format = log_format
        self.retention = retention
        self.stop = stop
        self.export_on_save = export_on_save
        self.upload_checkpoints = upload_checkpoints
        self.cfg = agent_cfg.to_rsl_rl()
        self.world_size = int(os.getenv("WORLD_SIZE", "1"))
        self.is_distributed = self.world_size > 1
        self.rank = int(os.getenv("RANK", "0")) if self.is_distributed else 0
        self.is_main = self.rank == 0
        self.cfg["multi_gpu"] = None
        if self.is_distributed:
            if not dist.is_initialized():
                backend = "nccl" if torch.device(self.device).type == "cuda" else "gloo"
                dist.init_process_group(backend=backend, rank=self.rank, world_size=self.world_size)
            local_rank = int(os.getenv("LOCAL_RANK", "0"))
            self.cfg["multi_gpu"] = {
                "global_rank": self.rank,
                "local_rank": local_rank,
                "world_size": self.world_size,
            }
        obs = env.get_observations()
        self.alg: FleetPPO = FleetPPO.construct_algorithm(obs, env, self.cfg, self.device)  # type: ignore[assignment]
        self.current_learning_iteration = 0
        self.env_steps = 0
        self.metrics: MetricsWriter | None = None
        self.last_record: dict[str, Any] = {}
        self._stats: EpisodeStats | None = None
        self.last_checkpoint: pathlib.Path | None = None
        self.interrupted: int | None = None
        """The signal that stopped the last `learn` early (agreed by all ranks), else None."""
        self._saved_iteration: int | None = None
        self._checkpoint_info = {
            "observations": {k: int(v.shape[-1]) for k, v in obs.items()},
            "num_actions": int(env.num_actions),
            "step_dt": float(getattr(env, "step_dt", 0.0)) or None,
            **(extra_checkpoint_info or {}),
        }
        on_cpu = torch.device(self.device).type == "cpu"
        self.update_threads = UpdateThreads.for_update(
            available=update_threads if on_cpu else 1,
            minibatch_size=self.alg.mini_batch_size,
            num_parameters=self.alg.num_trained_parameters,
            base=torch.get_num_threads(),
        )

    def get_inference_policy(self):
        """The policy in eval mode: called on observations it returns the distribution's mean (rsl_rl's name)."""
        self.alg.eval_mode()
        return self.alg.get_policy()

    @property
    def reducer_name(self) -> str | None:
        """How gradients are averaged across workers (None: one worker)."""
        return self.alg.reducer.name if self.alg.reducer is not None else None

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
        if self.is_distributed:
            self.alg.broadcast_parameters()
        if self.is_main and self.run_dir is not None and self.metrics is None:
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
        steps_per_iteration = self.cfg["num_steps_per_env"] * env.num_envs * self.world_size
        # Moving tensors between the env's device and the learner's costs a few microseconds per step even when
        # they are the same device (TensorDict.to): skipped then.
        same_device = torch.device(env.device) == torch.device(self.device)
        start_it = self.current_learning_iteration
        total_it = start_it + num_learning_iterations
        train_start = time.perf_counter()
        video, on_step = self.video, self.on_step
        for it in range(start_it, total_it):
            t0 = time.perf_counter()
            if video is not None:
                video.begin_iteration(it)
            with torch.inference_mode():
                for _ in range(self.cfg["num_steps_per_env"]):
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
                self.alg.compute_returns(obs)
            # the one host synchronisation of the rollout
            episode = stats.collect(self.alg.sum_across_workers)
            t1 = time.perf_counter()
            with self.update_threads.applied():
                losses = self.alg.update()
            t2 = time.perf_counter()

            self.current_learning_iteration = it + 1
            self.env_steps += steps_per_iteration
            interval = self.agent_cfg.consistency_check_interval
            if self.is_distributed and interval > 0 and (it + 1) % interval == 0:
                self.check_consistency()
            record = self._record(it, episode, losses, t1 - t0, t2 - t1, steps_per_iteration)
            if self.evaluator is not None and self.eval_interval > 0 and (it + 1) % self.eval_interval == 0:
                record.update(self.evaluate_policy())
            self.last_record = record
            if self.on_iteration is not None:
                self.on_iteration(record)
            if self.is_main:
                done = it + 1 - start_it
                eta = (time.perf_counter() - train_start) / done * (total_it - it - 1)
                print(format_iteration(record, total_it, eta, self.log_format), flush=True)
                if self.metrics is not None:
                    self.metrics.write(record, stats.recent)
                self._publish_videos(it)
            stop_signal = self._agreed_stop()
            if stop_signal or self.is_save_point(it + 1):
                self.save_checkpoint()
            if stop_signal:
                self.interrupted = stop_signal
                break

        if self._saved_iteration != self.current_learning_iteration:
            self.save_checkpoint()
        return self.last_record

    def evaluate_policy(self) -> dict[str, Any]:
        """Evaluate the deterministic policy with `evaluator` (rank 0 alone: no collective inside, so the other
        ranks simply wait at their next one) and keep the best policy so far as model_best.pt, outside the
        checkpoint retention. The evaluation's random draws leave training's random stream as it was."""
        actor = self.alg.get_policy()
        was_training = actor.training
        actor.eval()
        device = torch.device(self.device)
        try:
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                result = self.evaluator(lambda obs: actor(obs))  # type: ignore[misc]
        finally:
            actor.train(was_training)
        mean_return = result["mean_return"]
        out = {"Eval/mean_return": mean_return, "Eval/mean_episode_length": result["mean_episode_length"]}
        out.update({f"Eval/{name}": value for name, value in result["metrics"].items()})
        if mean_return is not None and (self.best_eval_return is None or mean_return > self.best_eval_return):
            self.best_eval_return = mean_return
            if self.run_dir is not None:
                self.save(self.run_dir.path / "model_best.pt", infos={"eval": result})
        return out

    def is_save_point(self, iteration: int) -> bool:
        """Whether a checkpoint is written after `iteration` (besides the end of training and a stop)."""
        if iteration % self.cfg["save_interval"] == 0:
            return True
        return self.retention is not None and self.retention.is_milestone(iteration)

    def _agreed_stop(self) -> int:
        """The signal number that asked any rank to stop (0: keep going); identical on every rank."""
        local = (self.stop.signum or 0) if self.stop is not None else 0
        if not self.is_distributed:
            return local
        # Each rank's signal number in its own slot, summed: every rank sees all of them and takes the largest.
        signals = torch.zeros(self.world_size, device=self.device)
        signals[self.rank] = local
        self.alg.sum_across_workers(signals)
        return int(signals.max().item())

    def parameter_checksum(self) -> torch.Tensor:
        """Two float64 numbers that differ when any actor/critic parameter differs (order-sensitive)."""
        flat = torch.cat([p.detach().reshape(-1).double() for p in self._policy_parameters()])
        weights = torch.arange(1, flat.numel() + 1, device=flat.device, dtype=torch.float64)
        return torch.stack([flat.sum(), (flat * weights).sum()])

    def check_consistency(self) -> None:
        """Stop with a clear error when the ranks' policy parameters are no longer identical."""
        checksum = self.parameter_checksum()
        gathered = [torch.empty_like(checksum) for _ in range(self.world_size)]
        dist.all_gather(gathered, checksum)
        differing = [rank for rank, other in enumerate(gathered) if not torch.equal(other, gathered[0])]
        if differing:
            raise RuntimeError(
                f"policy parameters differ between rank 0 and rank(s) {differing} after iteration "
                f"{self.current_learning_iteration}: the workers are no longer training one policy "
                "(gradient averaging broken or non-deterministic parameter updates)"
            )

    def _policy_parameters(self):
        yield from self.alg.get_policy().parameters()
        yield from self.alg.critic.parameters()

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
            "learning_rate": self.alg.learning_rate,
            "Policy/action_std": float(self.alg.action_std.mean()),
        }
        record.update({f"Loss/{k}": v for k, v in losses.items()})
        if self.update_threads.adaptive:
            record["Perf/update_threads"] = self.update_threads.history[-1][0]
        record.update(episode)
        return record

    def _publish_videos(self, iteration: int) -> None:
        """Name the videos finished so far on the console, and show them on wandb (at `iteration`)."""
        if self.video is None:
            return
        for path, _ in self.video.take_finished():
            print(f"video: {path}", flush=True)
            if self.metrics is not None:
                self.metrics.log_video(path, iteration)

    def close(self) -> None:
        if self.video is not None:
            self.video.close()  # a recording cut short by the end of training keeps its frames
            self._publish_videos(self.current_learning_iteration - 1)
            self.video = None
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None

    # ------------------------------------------------------------- checkpoints
    def save_checkpoint(self) -> pathlib.Path | None:
        """Collective: write model_<iteration>.pt (rank 0, when it has a run directory), prune old checkpoints,
        export the policy / upload the checkpoint when asked. Every rank must call it at the same iteration."""
        rng_states = self._gather_rng_states()
        self._saved_iteration = self.current_learning_iteration
        if not self.is_main or self.run_dir is None:
            return None
        path = self.run_dir.checkpoint(self.current_learning_iteration)
        self.save(path, rng_states=rng_states)
        self.last_checkpoint = path
        if self.retention is not None:
            self.retention.prune(self.run_dir.path)
        if self.export_on_save:
            self._export(path)
        if self.upload_checkpoints and self.metrics is not None:
            self.metrics.upload_checkpoint(path, self.current_learning_iteration)
            files = self.metrics.wandb_files
            if self.retention is not None and files is not None:
                self.retention.prune(files)
        return path

    def save(
        self, path: str | os.PathLike, infos: dict | None = None, rng_states: list | None = None
    ) -> None:
        """Write a checkpoint atomically: plain state dicts plus what is needed to rebuild the policy."""
        path = pathlib.Path(path)
        state = self.alg.save()
        state["iter"] = self.current_learning_iteration
        state["env_steps"] = self.env_steps
        state["infos"] = {**self._checkpoint_info, "world_size": self.world_size, **(infos or {})}
        state["agent_cfg"] = to_plain(dataclasses.asdict(self.agent_cfg))
        state["rsl_rl_cfg"] = to_plain({k: v for k, v in self.cfg.items() if k != "multi_gpu"})
        state["rng_states"] = rng_states if rng_states is not None else [self._rng_state()]
        tmp = path.with_name(f".{path.name}.tmp")
        torch.save(state, tmp)
        os.replace(tmp, path)

    def load(self, path, load_cfg=None, strict=True, map_location=None, restore_rng: bool = True) -> dict:
        """Restore policy, critic, optimizer (and normaliser statistics, part of the state dicts), iteration and
        step count, and this rank's torch RNG state when the checkpoint has one for it."""
        loaded = torch.load(path, weights_only=False, map_location=map_location or self.device)
        if self.alg.load(loaded, load_cfg, strict):
            self.current_learning_iteration = loaded["iter"]
            self.env_steps = loaded.get("env_steps", 0)
            self._saved_iteration = self.current_learning_iteration
        rng_states = loaded.get("rng_states") or []
        if restore_rng and self.rank < len(rng_states):
            self._set_rng_state(rng_states[self.rank])
        return loaded.get("infos") or {}

    def _rng_state(self) -> dict[str, torch.Tensor]:
        state = {"torch": torch.get_rng_state()}
        device = torch.device(self.device)
        if device.type == "cuda":
            state["cuda"] = torch.cuda.get_rng_state(device)
        return state

    def _set_rng_state(self, state: dict[str, torch.Tensor]) -> None:
        torch.set_rng_state(state["torch"].cpu())
        device = torch.device(self.device)
        if device.type == "cuda" and "cuda" in state:
            torch.cuda.set_rng_state(state["cuda"].cpu(), device)

    def _gather_rng_states(self) -> list[dict[str, torch.Tensor]]:
        if not self.is_distributed:
            return [self._rng_state()]
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, self._rng_state())
        return gathered

    def _export(self, checkpoint: pathlib.Path) -> None:
        """Export the current policy to <run_dir>/exported; a failed export is reported, training goes on."""
        from mjfleet.rl.export import export_policy, policy_metadata

        assert self.run_dir is not None
        actor = self.alg.get_policy()
        obs = self.env.get_observations().to(self.device)
        was_training = actor.training
        actor.eval()
        try:
            meta = policy_metadata(
                self.env,
                actor,
                obs,
                self._checkpoint_info.get("task", ""),
                iteration=self.current_learning_iteration,
                checkpoint=str(checkpoint),
            )
            export_policy(actor, obs, self.run_dir.exported_dir, meta)
        except Exception as exc:  # noqa: BLE001 - never lose a training run to an export problem
            print(
                f"error: policy export after iteration {self.current_learning_iteration} failed: {exc}",
                flush=True,
            )
        finally:
            actor.train(was_training)
