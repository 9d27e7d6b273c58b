"""Per-iteration episode statistics accumulated on device and read once per iteration."""

from __future__ import annotations

import torch
import torch.distributed as dist

RECENT_EPISODES = 100
"""rsl_rl's window: its dashboards plot the mean return and length of the last 100 completed episodes."""


class EpisodeStats:
    """Returns, lengths and the environment's episode log, summed on device over one iteration.

    Log keys follow one convention: `Episode*` values are means over the episodes that ended in that step,
    `Metrics/*` values are per-step quantities (reported as their mean over the iteration's steps and workers),
    anything else is a count (reported as the iteration's total over workers).

    `update` is called every environment step and never synchronises with the host; `collect` reduces
    everything across workers (one all_reduce) and reads it back in a single transfer. When the environment
    also hands over its log as one vector (`extras["log_packed"]`, in the order of `extras["log"]`, as
    MujocoVecEnv does), a step costs a handful of tensor operations whatever the number of log keys.

    Beside the iteration's means it keeps rsl_rl's moving window, the last `RECENT_EPISODES` completed episodes
    of each worker (`recent`, set by `collect`): each step stores the returns and lengths of the episodes that
    end (one multiplication into a buffer), and `collect` moves them into the window on device.
    """

    def __init__(self, num_envs: int, device: torch.device | str) -> None:
        self.device = torch.device(device)
        # Rows: 1 (counts finished episodes), running return, running length; one matrix-vector product with
        # the finished mask sums all three over the episodes that end.
        self._running = torch.zeros(3, num_envs, device=self.device)
        self._running[0] = 1.0
        self.current_return = self._running[1]
        self.current_length = self._running[2]
        self._running_tail = self._running[1:]
        self._ended_sums = torch.zeros(3, device=self.device)  # episodes, return, length
        self._sums: dict[str, torch.Tensor] = {}
        self._packed_keys: tuple[str, ...] = ()
        self._packed_sums = torch.zeros(0, device=self.device)
        # 1 at Episode keys, 0 elsewhere, and its complement: the per-key weights of a step come from them.
        self._packed_is_episode = torch.zeros(0, device=self.device)
        self._packed_not_episode = torch.zeros(0, device=self.device)
        self._last: dict[str, float] = {}
        # Per step of the iteration: rows finished (0/1), return and length of the episodes that ended. Grown in
        # the first iteration, reused afterwards.
        self._ends: list[torch.Tensor] = []
        # The window, as a ring: rows return, length; one extra column takes the writes of episodes that fall out
        # of the window before they enter it (more than RECENT_EPISODES ended in one iteration).
        self._window = torch.zeros(2, RECENT_EPISODES + 1, device=self.device)
        self._window_head = torch.zeros((), dtype=torch.long, device=self.device)
        self._window_count = torch.zeros((), device=self.device)
        nan = float("nan")
        self.recent: dict[str, float] = {"episodes": 0.0, "mean_return": nan, "mean_episode_length": nan}
        """rsl_rl's Train/mean_reward and Train/mean_episode_length: means over the last RECENT_EPISODES
        completed episodes of each worker (of all workers' windows together, with several); NaN before the
        first episode ends."""
        self._clear()

    def _clear(self) -> None:
        self._ended_sums.zero_()
        # New tensors rather than zero_(): these may have been created under torch.inference_mode.
        self._packed_sums = torch.zeros_like(self._packed_sums)
        self._sums = {}
        self._steps = 0

    def _add(self, key: str, value: torch.Tensor) -> None:
        total = self._sums.get(key)
        if total is None:
            self._sums[key] = value.detach().to(self.device, torch.float32).clone()
        else:
            total += value.detach()

    def update(self, rewards: torch.Tensor, dones: torch.Tensor, extras: dict) -> None:
        """Account one environment step of every environment."""
        self._steps += 1
        self.current_return += rewards
        self.current_length += 1
        finished = dones.float()
        self._ended_sums += torch.mv(self._running, finished)
        if self._steps > len(self._ends):
            self._ends.append(torch.empty_like(self._running))
        torch.mul(self._running, finished, out=self._ends[self._steps - 1])
        self._running_tail.mul_(~dones if dones.dtype == torch.bool else 1.0 - finished)
        # Episode_* entries are means over the episodes that ended this step: weight them by that count.
        count = extras.get("episodes_finished")
        log = extras.get("log", {})
        packed = extras.get("log_packed")
        if packed is not None and count is not None:
            self._add_packed(tuple(log), packed, count)
            return
        for key, value in log.items():
            value = torch.as_tensor(value, device=self.device, dtype=torch.float32)
            if key.startswith("Episode") and count is not None:
                self._add(key, value * count)
            else:
                self._add(key, value)

    def _add_packed(self, keys: tuple[str, ...], packed: torch.Tensor, count: torch.Tensor) -> None:
        if keys != self._packed_keys:  # first step, or the environment's log changed: keep what was summed
            for key, total in zip(self._packed_keys, self._packed_sums.unbind(), strict=True):
                self._add(key, total)
            self._packed_keys = keys
            self._packed_sums = torch.zeros(len(keys), device=self.device)
            self._packed_is_episode = torch.tensor(
                [float(k.startswith("Episode")) for k in keys], device=self.device
            )
            self._packed_not_episode = 1.0 - self._packed_is_episode
        # The weights: the count at Episode keys, 1 elsewhere, in one operation that never reads the count on the
        # host (masked_fill_ with a tensor value may, on CUDA).
        count = count.to(self.device, torch.float32)
        weights = torch.addcmul(self._packed_not_episode, self._packed_is_episode, count)
        self._packed_sums.addcmul_(packed.detach().to(self.device, torch.float32), weights)

    def collect(self, sum_across_workers=None) -> dict[str, float]:
        """Global (all-worker) statistics of this iteration; resets the accumulators.

        `sum_across_workers(tensor)` sums a float32 tensor over the workers in place (default: one all_reduce).

        Keys: `episodes`, `mean_return`, `mean_episode_length`, each `Episode*` key as a mean over finished
        episodes, each `Metrics/*` key as a mean over steps (and workers), and other log keys as totals (counts
        such as Sim/nan_resets). When no episode ended, episode means repeat the last known value.
        """
        keys = ["recent_episodes", "recent_return", "recent_length"]
        keys += ["episodes", "return", "length", *self._packed_keys, *self._sums]
        parts = [self._recent_sums(), self._ended_sums, self._packed_sums]
        if self._sums:
            parts.append(torch.stack(list(self._sums.values())))
        packed = torch.cat(parts)
        workers = 1
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            if sum_across_workers is None:
                dist.all_reduce(packed, op=dist.ReduceOp.SUM)
            else:
                sum_across_workers(packed)
            workers = dist.get_world_size()
        values: dict[str, float] = {}
        # A key can sit in two parts when the environment's log changed during the iteration: add them up.
        for key, value in zip(keys, packed.tolist(), strict=True):
            values[key] = values.get(key, 0.0) + value
        recent = [values.pop(k) for k in ("recent_episodes", "recent_return", "recent_length")]
        self.recent = {
            "episodes": recent[0],
            "mean_return": recent[1] / recent[0] if recent[0] else float("nan"),
            "mean_episode_length": recent[2] / recent[0] if recent[0] else float("nan"),
        }
        episodes = values.pop("episodes")
        out: dict[str, float] = {"episodes": episodes}
        means = {"mean_return": values.pop("return"), "mean_episode_length": values.pop("length")}
        means.update({k: v for k, v in values.items() if k.startswith("Episode")})
        for key, total in means.items():
            if episodes > 0:
                self._last[key] = total / episodes
            out[key] = self._last.get(key, float("nan"))
        for key, total in values.items():
            if key.startswith("Metrics/"):
                out[key] = total / max(self._steps * workers, 1)
            elif not key.startswith("Episode"):
                out[key] = total
        self._clear()
        return out

    def _recent_sums(self) -> torch.Tensor:
        """Move this iteration's ended episodes into the window, in the order they ended (step, then env, as
        rsl_rl's deque receives them); returns its (count, return sum, length sum). On device, no host read."""
        if self._steps == 0:
            return torch.cat([self._window_count.reshape(1), self._window[:, :-1].sum(1)])
        ends = torch.stack(self._ends[: self._steps], dim=1).reshape(3, -1)  # (3, steps * envs), step-major
        finished = ends[0]
        order = torch.cumsum(finished, 0)  # 1 for the first episode that ended, ..., n for the last
        n = order[-1]
        size = RECENT_EPISODES
        # Only the last `size` of them can be in the window; each gets its own slot after the ring's head.
        keep = (finished > 0) & (n - order < size)
        slots = (self._window_head + order.long() - 1) % size
        slots = torch.where(keep, slots, size)
        self._window.scatter_(1, slots.expand(2, -1), ends[1:])
        self._window_head = (self._window_head + n.long()) % size
        self._window_count = torch.clamp(self._window_count + n, max=size)
        return torch.cat([self._window_count.reshape(1), self._window[:, :-1].sum(1)])
