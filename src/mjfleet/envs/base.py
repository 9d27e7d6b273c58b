"""A vectorised MuJoCo-Warp environment with the rsl_rl `VecEnv` interface.

A task subclasses `MujocoVecEnv`, fills in a handful of hooks (model, observations, terminations, reset
randomisation) and lists its reward terms, plain functions `fn(env) -> (num_envs,) tensor`, by name in the class's
`reward_terms` table (each weighted by the field of the same name in the task's reward weights; bound and summed
by mjfleet.envs.rewards). Everything here works on whole batches of environments on the simulation's device: no
Python loops over environments, no host synchronisation inside `step`.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Mapping
from typing import ClassVar

import mujoco
import torch
from rsl_rl.env import VecEnv
from tensordict import TensorDict

from mjfleet.envs.config import EnvConfig
from mjfleet.envs.cuda_graph import CapturedFunction, try_capture
from mjfleet.envs.rewards import RewardTerm, WeightedRewards, penalty_curriculum_scale
from mjfleet.sim import Simulation

NAN_RESETS_KEY = "Sim/nan_resets"


class MujocoVecEnv(VecEnv):
    """Batched environment over one `Simulation`. Subclasses implement the task-specific hooks below."""

    cfg: EnvConfig
    #: Run `mj_forward` once per policy step, after stepping and resetting, so that body poses and sensors match
    #: qpos/qvel when observations are computed. Off by default: it costs about one extra physics step, and tasks
    #: that observe qpos/qvel only (the usual case) do not need it. Contact forces and sensors read in rewards and
    #: terminations come from the last physics substep either way.
    needs_forward: bool = False
    #: Also report each step's observations from before the resets (`extras["final_observations"]`): what an
    #: environment that timed out reached, which an off-policy learner bootstraps from (SAC sets it; the returned
    #: observations are the new episodes' first ones). Off by default: it computes the observations twice.
    record_final_observations: bool = False
    #: The observation groups returned (`select_observations`; None: every group the task computes). A learner
    #: selects those its networks read, so its rollout storage and minibatches carry no other group.
    observation_groups: tuple[str, ...] | None = None
    #: Model fields given a per-environment copy (for domain randomisation), e.g. ("geom_friction",).
    per_env_model_fields: tuple[str, ...] = ()
    #: mujoco_warp OverflowType bits whose console warnings are not printed (they stay set in `data.overflow`).
    silenced_overflow_warnings: int = 0
    #: What an action does, for an exported policy's metadata (tasks say it in their own units).
    action_meaning: str = "actuator controls: ctrl = action_scale * action"
    #: The task's reward terms by name: `fn(env)` returns a (num_envs,) tensor, weighted by the field of the same
    #: name in `reward_config()` (a zero weight disables it). Every weight must name a term and every term have a
    #: weight; both are checked when the environment is built.
    reward_terms: ClassVar[Mapping[str, RewardTerm]] = {}

    def __init__(self, cfg: EnvConfig, device: str = "cpu") -> None:
        if cfg.num_envs is None or cfg.num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {cfg.num_envs}")
        self.cfg = cfg
        self.mj_model = self.build_model()
        self.sim = Simulation(
            self.mj_model,
            cfg.num_envs,
            device,
            substeps=cfg.decimation,
            capture=cfg.capture_graphs,
            per_world_model_fields=self.per_env_model_fields,
            silenced_overflow_warnings=self.silenced_overflow_warnings,
            **self.simulation_sizes(),
        )
        self.device = self.sim.device
        self.num_envs = cfg.num_envs
        self.num_actions = self.sim.ctrl.shape[1]
        self.physics_dt = float(self.mj_model.opt.timestep)
        self.step_dt = self.physics_dt * cfg.decimation
        self.max_episode_length = math.ceil(cfg.episode_length_s / self.step_dt)

        n, dev = self.num_envs, self.device
        self._episode_length_buf = torch.zeros(n, dtype=torch.long, device=dev)
        self.actions = torch.zeros(n, self.num_actions, device=dev)
        self.last_actions = torch.zeros_like(self.actions)
        self.terminated = torch.zeros(n, dtype=torch.bool, device=dev)
        self.time_outs = torch.zeros(n, dtype=torch.bool, device=dev)
        self.rewards = torch.zeros(n, device=dev)
        self._all_envs = torch.ones(n, dtype=torch.bool, device=dev)

        self.setup()
        self._weighted_rewards = WeightedRewards(
            type(self), self.reward_terms, self.reward_config(), dev, env=self
        )
        self.reward_weights = self._weighted_rewards.weights
        self._reward_names = self._weighted_rewards.names
        # The episode log in one matrix-vector product with the mask of episodes that end: rows are each reward
        # term's running episode sum, this step's time-out flags, and ones (which count the episodes that end).
        k = len(self._reward_names)
        self._log_rows = torch.zeros(k + 2, n, device=dev)
        self._log_rows[-1] = 1.0
        self._episode_sums = self._log_rows[:k]
        self._time_out_row = self._log_rows[k]
        self._log_keys = (
            *(f"Episode_Reward/{name}" for name in self._reward_names),
            "Episode_Termination/time_out",
            NAN_RESETS_KEY,
        )
        self.extras: dict = {"log": {}}
        # Recorded at the second step: the first, op by op, doubles as torch's warm-up.
        self._capture_after_this_step = cfg.capture_step and self.sim.captured and self.device.type == "cuda"
        self._step_graph_pending = False
        self._step_graph: CapturedFunction | None = None
        self._skip_idle_resets = self.device.type == "cpu"
        self.reset()

    # ------------------------------------------------------------- task hooks
    @abstractmethod
    def build_model(self) -> mujoco.MjModel:
        """Compile and return the MuJoCo model every environment simulates."""

    def simulation_sizes(self) -> dict:
        """Optional contact/constraint buffer sizes for `mujoco_warp.make_data` (nconmax, njmax)."""
        return {}

    def setup(self) -> None:  # noqa: B027 - optional hook
        """Allocate task buffers; called once after the simulation exists, before the first reset."""

    def reward_config(self):
        """The task's reward (default `cfg.rewards`): a recipe (name -> mjfleet.envs.terms.Term), or a dataclass of
        weights whose field `x` weights `reward_terms["x"]`; a zero weight disables a term."""
        return getattr(self.cfg, "rewards")  # noqa: B009 - tasks add the field to their EnvConfig subclass

    @abstractmethod
    def compute_observations(self) -> dict[str, torch.Tensor]:
        """Observation groups, e.g. {"actor": (num_envs, n), "critic": (num_envs, m)}."""

    def observation_terms(self) -> dict[str, list[tuple[str, int]]]:
        """The named parts of observation groups, in column order: {group: [(term, size), ...]} (what an exported
        policy's metadata lists as observation slices). A group left out is one term named after the group."""
        return {}

    def observation_clips(self) -> dict[str, tuple[float, float]]:
        """The terms of `observation_terms` that are clipped, and the (low, high) each is clipped to; a term not
        named here is not clipped. An export states these (policy.json's input.terms, mjlab's keys)."""
        return {}

    @abstractmethod
    def compute_terminations(self) -> torch.Tensor:
        """Boolean (num_envs,) tensor: environments whose episode ends now (not counting time limits)."""

    @abstractmethod
    def randomize_reset_state(self, mask: torch.Tensor) -> None:
        """Write the initial state of the environments in `mask` (the simulation has just reset them)."""

    def action_bounds(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(low, high) per action: the range a bounded policy (SAC's squashed actions) should act in. Default: the
        clip range every action is clipped to anyway."""
        clip = float(self.cfg.clip_actions)
        return torch.full((self.num_actions,), -clip), torch.full((self.num_actions,), clip)

    def apply_actions(self, actions: torch.Tensor) -> None:
        """Write clipped policy actions into the actuators' controls (in place, no allocation)."""
        torch.mul(actions, self.cfg.action_scale, out=self.sim.ctrl)

    def post_physics_step(self) -> None:  # noqa: B027 - optional hook
        """Update task state after physics advanced and before terminations/rewards (e.g. commands)."""

    def on_reset(self, mask: torch.Tensor) -> None:  # noqa: B027 - optional hook
        """Reset task buffers of the environments in `mask`."""

    def before_observations(self) -> None:  # noqa: B027 - optional hook
        """After rewards and resets, before the observations: changes the next observation must show but this
        step's reward must not see (a locomotion task redraws its velocity commands here)."""

    def finish_step(self, log: dict[str, torch.Tensor], episodes_finished: torch.Tensor) -> None:  # noqa: B027
        """Last hook of a step (after resets and observations): adjust `self.rewards` in place, add log entries.

        `episodes_finished` is the number of episodes that ended in this step (a tensor, on device). Entries are
        0-d tensors on the device (never read on the host here); how the runner aggregates them over an
        iteration (mjfleet.rl.episode_stats) follows the key:

        - `Episode...` keys: a mean over the episodes that ended in this step (it is weighted by their count);
        - `Metrics/...` keys: a value for this step (averaged over the iteration's steps and the workers);
        - anything else: a count for this step (summed), like `Sim/nan_resets`.
        """

    def set_training_progress(self, steps_per_env: int) -> dict[str, float]:
        """Called by the runner before each training iteration with the policy steps every environment has taken in
        the run so far (continued on resume): sets the penalty curriculum's scale. Returns what to log."""
        scale = penalty_curriculum_scale(self.cfg, steps_per_env)
        if scale is None:
            return {}
        self._weighted_rewards.scale_penalties(scale)
        return {"Train/penalty_scale": scale}

    @property
    def penalty_scale(self) -> float:
        """The share of their weight the penalties (negative weights) carry now: below 1 only while training's
        penalty curriculum runs (`set_training_progress`)."""
        return self._weighted_rewards.penalty_scale

    # ---------------------------------------------------------- VecEnv API
    def get_observations(self) -> TensorDict:
        return self._obs

    def select_observations(self, groups) -> TensorDict:
        """From now on return only the observation `groups`; returns the current observations, so selected."""
        self.observation_groups = tuple(dict.fromkeys(groups))
        self._obs = self._obs.select(*self.observation_groups)
        return self._obs

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        """Clip and apply `actions`, advance the physics, compute rewards and terminations, reset finished envs.

        On CUDA (with `capture_step`) the first call runs op by op; the second records the whole step, physics
        and torch code, into one CUDA graph (see mjfleet.envs.cuda_graph), and every call from then on replays
        it. Observations, rewards and dones are returned as fresh tensors either way; `extras` holds the step's
        own buffers, overwritten by the next step.
        """
        if self._step_graph_pending:
            self._step_graph_pending = False
            self._step_graph = try_capture(self.step_op_by_op, actions, f"{type(self).__name__}.step")
        if self._step_graph is None:
            result = self.step_op_by_op(actions)
            self._step_graph_pending, self._capture_after_this_step = self._capture_after_this_step, False
            return result
        obs, rewards, dones, extras = self._step_graph(actions)
        self._obs = obs.clone()  # rsl_rl keeps the previous step's observations while the next step runs
        return self._obs, rewards.clone(), dones.clone(), extras

    @property
    def episode_length_buf(self) -> torch.Tensor:
        """Policy steps since each environment's last reset (rsl_rl randomises it once before training)."""
        return self._episode_length_buf

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        # In place: a recorded CUDA-graph step keeps updating this very buffer.
        self._episode_length_buf.copy_(value)

    @property
    def step_is_graph(self) -> bool:
        """Whether `step()` replays one captured CUDA graph (physics and torch code together)."""
        return self._step_graph is not None

    def step_op_by_op(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        """The step itself, op by op (what the CUDA graph records). No host synchronisation may happen here."""
        clip = self.cfg.clip_actions
        torch.clamp(actions, -clip, clip, out=self.actions)
        self.apply_actions(self.actions)
        self.sim.step()
        self.episode_length_buf += 1
        self.post_physics_step()

        # A world whose physics blew up is terminated and reset; training goes on. (A NaN or infinity anywhere in
        # a world's state makes the sum of its qpos and qvel non-finite, and then s - s is NaN, never 0: one check
        # per world, in two operations where ~isfinite takes five.)
        state_sum = self.sim.qpos.sum(dim=1) + self.sim.qvel.sum(dim=1)
        diverged = (state_sum - state_sum) != 0.0
        self.terminated = self.compute_terminations() | diverged
        self.time_outs = (self.episode_length_buf >= self.max_episode_length) & ~self.terminated
        dones = self.terminated | self.time_outs
        self.rewards = self._weighted_rewards.compute(self, self._episode_sums, like=self.rewards)

        # Every log value in one float32 vector, which EpisodeStats accumulates with one operation instead of one
        # per key (the dict's own entries are views of it; entries the task adds in finish_step are appended).
        means, finished = self._episode_log(dones)
        packed = torch.cat((means, diverged.sum(dtype=torch.float32).view(1)))
        log = dict(zip(self._log_keys, packed.unbind(), strict=True))
        # On a CPU reading `dones` costs nothing, so a step in which no episode ends skips the reset work (kernels
        # over every world, the randomisation's draws); on a GPU the read would stall the queued work.
        # This step's action becomes the previous action the next observation shows (0 where a new episode starts).
        self.last_actions.copy_(self.actions)
        any_done = not self._skip_idle_resets or bool(dones.any())
        final = self._final_observations() if self.record_final_observations and any_done else None
        if any_done:
            self._reset_envs(dones)
        self.before_observations()
        if self.needs_forward:
            self.sim.forward()
        self._obs = self._observation_dict()
        self.finish_step(log, finished)
        if len(log) > len(packed):  # entries the task added
            added = [v.to(torch.float32) for v in list(log.values())[len(packed) :]]
            packed = torch.cat((packed, torch.stack(added)))
        self.extras = {
            "time_outs": self.time_outs,
            "log": log,
            "log_packed": packed,
            "episodes_finished": finished,
        }
        if self.record_final_observations:
            # where no environment finished, the returned observations are the final ones
            self.extras["final_observations"] = final if final is not None else self._obs
        return self._obs, self.rewards, dones, self.extras

    def reset(self) -> tuple[TensorDict, dict]:
        """Reset every environment (training never needs this: environments reset themselves when done)."""
        self._reset_envs(self._all_envs)
        self.sim.forward()
        self._obs = self._observation_dict()
        return self._obs, {}

    def set_state(self, qpos: torch.Tensor, qvel: torch.Tensor) -> TensorDict:
        """Put every environment in the state (qpos, qvel) and return its observations: freshly reset environments
        then start their episode from it (`play --initial-state`). The task's own state (commands, counters, the
        last action) is left as the reset made it."""
        self.sim.qpos[:] = qpos
        self.sim.qvel[:] = qvel
        self.sim.forward()  # body poses, contacts and sensors of the new state, as a reset computes them
        self._obs = self._observation_dict()
        return self._obs

    # ------------------------------------------------------------- internals
    def _episode_log(self, dones: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(each reward term's episode sum and the time-out share, as means over the episodes that end in this
        step (zero when none does); the number of episodes that end (float32)), reduced on device."""
        self._time_out_row.copy_(self.time_outs)
        totals = torch.mv(self._log_rows, dones.float())
        finished = totals[-1]
        return totals[:-1] / finished.clamp(min=1.0), finished

    def _reset_envs(self, mask: torch.Tensor) -> None:
        self.sim.reset(mask)
        self.randomize_reset_state(mask)
        self.episode_length_buf.masked_fill_(mask, 0)
        self.last_actions.masked_fill_(mask.unsqueeze(1), 0.0)
        self._episode_sums.masked_fill_(mask, 0.0)
        if hasattr(self, "_weighted_rewards"):  # the first reset comes before the terms are bound
            self._weighted_rewards.reset(self, mask)
        self.on_reset(mask)

    def _final_observations(self) -> TensorDict:
        """The observations of the state this step reached, before finished environments are reset."""
        if self.needs_forward:
            self.sim.forward()
        return self._observation_dict()

    def _observation_dict(self) -> TensorDict:
        obs = self.compute_observations()
        if self.observation_groups is not None:
            obs = {group: obs[group] for group in self.observation_groups}
        return TensorDict(obs, batch_size=[self.num_envs], device=self.device)
