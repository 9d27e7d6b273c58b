"""A VecEnv stand-in with scripted episodes, for tests that need `mjfleet.evaluation.evaluate`'s real summaries
without a simulator: each environment's episodes end by a fall after a set number of steps, or at the time limit."""

from __future__ import annotations

import math

import torch


class ScriptedEnv:
    """`num_envs` environments; environment i's episodes end with a fall ("fell") after `fall_after[i]` steps (None:
    never falls, its episodes time out after `max_episode_length`). Every step earns `reward` and logs `error` as
    the task metric `lin_vel_error`."""

    def __init__(
        self,
        fall_after: list[int | None],
        max_episode_length: int = 100,
        reward: float = 1.0,
        error: float = 0.5,
    ) -> None:
        self.num_envs, self.num_actions, self.device = len(fall_after), 1, "cpu"
        self.max_episode_length = max_episode_length
        self.reward, self.error = reward, error
        self.fall_after = torch.tensor([math.inf if n is None else float(n) for n in fall_after])
        self.t = torch.zeros(self.num_envs)

    def _obs(self) -> torch.Tensor:
        return self.t[:, None].clone()

    def reset(self):
        self.t.zero_()
        return self._obs(), {}

    def step(self, actions: torch.Tensor):
        self.t += 1
        fell = self.t >= self.fall_after
        time_outs = (self.t >= self.max_episode_length) & ~fell
        dones = fell | time_outs
        ended = int(dones.sum())
        log = {
            "Metrics/lin_vel_error": torch.tensor(self.error),
            # as a task logs it: the share of the episodes that ended in this step that ended by this cause
            "Episode_Termination/fell": torch.tensor(float(fell.sum()) / max(ended, 1)),
        }
        self.t[dones] = 0
        rewards = torch.full((self.num_envs,), self.reward)
        return self._obs(), rewards, dones, {"time_outs": time_outs, "log": log}
