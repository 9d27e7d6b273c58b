"""One worker's replay buffer: a ring of environment steps on the worker's device, and n-step targets from it.

The ring is time-major, (steps, num_envs, ...): row t holds every environment's transition of one vectorised step,
so an environment's next transitions are the next rows. n-step returns are therefore computed when a batch is
sampled, by looking ahead in the same column, rather than precomputed when the data arrives (which would delay
every transition by n steps and need a second buffer).

What a transition keeps, and why:

- `obs`, `critic_obs`: the observations the action was chosen from (raw; normalised when sampled, with the
  statistics of that moment).
- `next_obs`, `next_critic_obs`: the observation the step led to, *before* any reset. The environment resets a
  finished environment inside `step` and returns the new episode's first observation; bootstrapping a time-out
  from that would value the wrong state. `MujocoVecEnv` exposes the pre-reset observation as
  `extras["final_observations"]` when `record_final_observations` is set, and the buffer stores it for
  environments that finished and the returned observation for the others.
- `terminated`: the episode ended in a failure state: no bootstrapping (its value is the rewards so far).
- `done`: the episode ended (terminated or timed out): an n-step return stops there; a time-out bootstraps from
  `next_obs` (the state at the time limit is not a failure: the task goes on beyond it in spirit).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch


@dataclass
class Batch:
    """Sampled n-step transitions: inputs of the critic and actor losses (observations still raw)."""

    obs: torch.Tensor
    critic_obs: torch.Tensor
    actions: torch.Tensor
    returns: torch.Tensor
    """Discounted rewards of the up to n steps taken, stopping at the episode's end."""
    next_obs: torch.Tensor
    next_critic_obs: torch.Tensor
    """Observations to bootstrap from: after the last of those steps, before any reset."""
    bootstrap: torch.Tensor
    """gamma^k for the k steps summed, 0 where the episode terminated within them: target = returns + bootstrap
    x (min Q_target(next) - alpha log pi)."""

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """The fields in declaration order (what a recorded gradient step copies into its static inputs)."""
        return tuple(getattr(self, f.name) for f in fields(self))


class ReplayBuffer:
    """A ring of `capacity // num_envs` vectorised steps, every tensor allocated once on `device`."""

    def __init__(
        self,
        capacity: int,
        num_envs: int,
        obs_dim: int,
        critic_obs_dim: int,
        action_dim: int,
        device: str | torch.device,
    ) -> None:
        self.num_envs = num_envs
        self.length = max(capacity // num_envs, 1)
        """Rows (vectorised steps) the ring holds."""
        shape = (self.length, num_envs)
        self.obs = torch.zeros(*shape, obs_dim, device=device)
        self.next_obs = torch.zeros_like(self.obs)
        self.critic_obs = torch.zeros(*shape, critic_obs_dim, device=device)
        self.next_critic_obs = torch.zeros_like(self.critic_obs)
        self.actions = torch.zeros(*shape, action_dim, device=device)
        self.rewards = torch.zeros(*shape, device=device)
        self.terminated = torch.zeros(*shape, dtype=torch.bool, device=device)
        self.done = torch.zeros(*shape, dtype=torch.bool, device=device)
        self.position = 0
        """The row the next step goes to."""
        self.size = 0
        """Rows written so far (at most `length`)."""

    @property
    def num_transitions(self) -> int:
        return self.size * self.num_envs

    @property
    def nbytes(self) -> int:
        """Memory the ring holds on its device (allocated up front, whatever is written)."""
        tensors = (self.obs, self.next_obs, self.critic_obs, self.next_critic_obs, self.actions, self.rewards)
        return sum(t.numel() * t.element_size() for t in (*tensors, self.terminated, self.done))

    def add(
        self,
        obs: torch.Tensor,
        critic_obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        next_critic_obs: torch.Tensor,
        terminated: torch.Tensor,
        done: torch.Tensor,
    ) -> None:
        """Write one vectorised step (every environment's transition) over the oldest row."""
        row = self.position
        self.obs[row].copy_(obs)
        self.critic_obs[row].copy_(critic_obs)
        self.actions[row].copy_(actions)
        self.rewards[row].copy_(rewards)
        self.next_obs[row].copy_(next_obs)
        self.next_critic_obs[row].copy_(next_critic_obs)
        self.terminated[row].copy_(terminated)
        self.done[row].copy_(done)
        self.position = (row + 1) % self.length
        self.size = min(self.size + 1, self.length)

    def sample(self, batch_size: int, n_step: int, gamma: float, generator=None) -> Batch:
        """`batch_size` uniformly drawn transitions with their n-step targets' ingredients (`n_step_targets`)."""
        device = self.obs.device
        ages = torch.randint(self.size, (batch_size,), device=device, generator=generator)
        envs = torch.randint(self.num_envs, (batch_size,), device=device, generator=generator)
        # Age 0 is the newest row; a start of age a has a steps after it, so it sums at most a + 1 rewards.
        rows = (self.position - 1 - ages) % self.length
        steps = (rows.unsqueeze(1) + torch.arange(n_step, device=device)) % self.length  # (batch, n)
        cols = envs.unsqueeze(1).expand_as(steps)
        available = torch.arange(n_step, device=device) <= ages.unsqueeze(1)
        returns, bootstrap, last = n_step_targets(
            self.rewards[steps, cols], self.done[steps, cols], self.terminated[steps, cols], available, gamma
        )
        last_rows = steps.gather(1, last.unsqueeze(1)).squeeze(1)
        return Batch(
            obs=self.obs[rows, envs],
            critic_obs=self.critic_obs[rows, envs],
            actions=self.actions[rows, envs],
            returns=returns,
            next_obs=self.next_obs[last_rows, envs],
            next_critic_obs=self.next_critic_obs[last_rows, envs],
            bootstrap=bootstrap,
        )


def n_step_targets(
    rewards: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor,
    available: torch.Tensor,
    gamma: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The n-step return's parts for a batch of n consecutive steps of one environment each, shapes (batch, n).

    A start sums the rewards of its steps up to and including the first that ends the episode (`done`), or the
    last `available` one (data newer than the buffer's newest row does not exist yet). Returns (discounted reward
    sum, bootstrap factor gamma^k or 0 if that last step `terminated`, index of that last step): the target is
    sum + factor x V(next observation of the last step). A time-out is `done` without `terminated`: the sum stops
    and the value of the state reached at the time limit is bootstrapped.
    """
    n = rewards.shape[1]
    ended = done & available
    # A step counts when every step before it was available and none of them ended the episode.
    stops = (ended | ~available).to(torch.int32)
    stopped_before = torch.cumsum(stops, dim=1) - stops
    counts = (stopped_before == 0) & available
    discounts = gamma ** torch.arange(n, device=rewards.device, dtype=rewards.dtype)
    returns = (rewards * discounts * counts).sum(dim=1)
    k = counts.sum(dim=1)  # steps summed: >= 1 (the first step is always available)
    last = k - 1
    last_terminated = terminated.gather(1, last.unsqueeze(1)).squeeze(1)
    bootstrap = torch.where(last_terminated, 0.0, gamma ** k.to(rewards.dtype))
    return returns, bootstrap, last
