"""Per-iteration episode statistics accumulated on device and read once per iteration."""

from __future__ import annotations

import torch
import torch.distributed as dist


class EpisodeStats:
    """Returns, lengths and the environment's episode log, summed on device over one iteration.

    Log keys follow one convention: `Episode*` values are means over the episodes that ended in that step,
    `Metrics/*` values are per-step quantities (reported as their mean over the iteration's steps and workers),
    anything else is a count (reported as the iteration's total over workers).

    `update` is called every environment step and never synchronises with the host; `collect` reduces
    everything across workers (one all_reduce) and reads it back in a single transfer.
    """

    def __init__(self, num_envs: int, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self.current_return = torch.zeros(num_envs, device=self.device)
        self.current_length = torch.zeros(num_envs, device=self.device)
        self._sums: dict[str, torch.Tensor] = {}
        self._last: dict[str, float] = {}
        self._clear()

    def _clear(self) -> None:
        zero = torch.zeros((), device=self.device)
        self._sums = {"episodes": zero.clone(), "return": zero.clone(), "length": zero.clone()}
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
        self._sums["episodes"] += finished.sum()
        self._sums["return"] += (self.current_return * finished).sum()
        self._sums["length"] += (self.current_length * finished).sum()
        self.current_return *= 1.0 - finished
        self.current_length *= 1.0 - finished
        # Episode_* entries are means over the episodes that ended this step: weight them by that count.
        count = extras.get("episodes_finished")
        for key, value in extras.get("log", {}).items():
            value = torch.as_tensor(value, device=self.device, dtype=torch.float32)
            if key.startswith("Episode") and count is not None:
                self._add(key, value * count)
            else:
                self._add(key, value)

    def collect(self) -> dict[str, float]:
        """Global (all-worker) statistics of this iteration; resets the accumulators.

        Keys: `episodes`, `mean_return`, `mean_episode_length`, each `Episode_*` key as a mean over finished
        episodes, and other log keys as totals. When no episode ended, means repeat the last known value.
        """
        keys = list(self._sums)
        packed = torch.stack([self._sums[k] for k in keys])
        workers = 1
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(packed, op=dist.ReduceOp.SUM)
            workers = dist.get_world_size()
        values = dict(zip(keys, packed.tolist(), strict=True))
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
