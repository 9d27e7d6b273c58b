"""Watch the first environments of a running batch in a web browser (`play --viewer viser`).

A thin layer over state the environment already has: the batched body poses of the simulation (drawn by mjviser's
MuJoCo scene: geoms, meshes and height fields), the task's velocity commands (`env.commands`, with
`cfg.commands.fix` so that later redraws keep the user's choice) and the per-term reward sums of the current
episodes (`env._episode_sums`). The page's controls only set requests; `show()`, called by the evaluation after
every policy step on the main thread, carries them out, so the simulation is touched by one thread only.

The server binds 127.0.0.1 unless told otherwise and serves the page and its websocket on one port.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mjfleet.viewers.scene import LOOPBACK, BatchScene

Policy = Callable[[Any], Any]
PLOT_STEPS = 250
"""Steps of reward history the live plot shows."""
PLOT_EVERY = 5
"""Policy steps between two plot updates (each sends the whole window to the page)."""


class BrowserViewer:
    """A viser server showing environments 0..envs-1 of `env`, paced at `speed` x real time, with controls."""

    def __init__(
        self,
        env: Any,
        policy: Policy,
        *,
        envs: int = 4,
        follow: int = 0,
        speed: float = 1.0,
        host: str = LOOPBACK,
        port: int = 8080,
        checkpoints: dict[str, Path] | None = None,
        current: str | None = None,
        load_policy: Callable[[Path], Policy] | None = None,
        title: str = "mjfleet",
    ) -> None:
        self.env = env
        self.policy = policy
        self.speed = speed
        self._checkpoints = checkpoints or {}
        self._load_policy = load_policy
        self._lock = threading.Lock()
        self._requests: dict[str, Any] = {}
        self._paused = False
        self._stop = False
        self.steps = 0

        self.view = BatchScene(env, envs=envs, follow=follow, host=host, port=port, title=title)
        self.server, self.scene = self.view.server, self.view.scene
        self.port, self.shown = self.view.port, self.view.shown
        self._status = self.view.status
        gui = self.server.gui
        with gui.add_folder("Simulation"):
            pause = gui.add_button("Pause / resume")
            step = gui.add_button("Step once")
            reset = gui.add_button("Reset")
            stop = gui.add_button("Stop")
            self._speed = gui.add_slider(
                "speed", min=0.1, max=max(4.0, speed), step=0.1, initial_value=round(speed, 1)
            )
        pause.on_click(lambda _: self._toggle_pause())
        step.on_click(lambda _: self._request("step", True))
        reset.on_click(lambda _: self._request("reset", True))
        stop.on_click(lambda _: self._request("stop", True))
        self._command_sliders = self._add_command_sliders(gui)
        if self._checkpoints and load_policy is not None:
            with gui.add_folder("Policy"):
                names = list(self._checkpoints)
                dropdown = gui.add_dropdown("checkpoint", options=names, initial_value=current or names[-1])
            dropdown.on_update(lambda _: self._request("checkpoint", dropdown.value))
        self._terms = list(getattr(env, "_reward_names", []))
        self._previous_sums: np.ndarray | None = None
        self._history = deque(maxlen=PLOT_STEPS)
        self._plot = self._add_reward_plot(gui)
        self._next = time.perf_counter()

    # ------------------------------------------------------------------ the page's controls (viser's threads)
    def _request(self, key: str, value: Any) -> None:
        with self._lock:
            self._requests[key] = value

    def _toggle_pause(self) -> None:
        with self._lock:
            self._paused = not self._paused

    def _add_command_sliders(self, gui: Any) -> list[Any]:
        """vx, vy, wz sliders spanning the task's command ranges, for tasks with velocity commands."""
        commands = getattr(self.env.cfg, "commands", None)
        if not callable(getattr(commands, "fix", None)) or getattr(self.env, "commands", None) is None:
            return []
        assert commands is not None
        ranges = [commands.lin_vel_x, commands.lin_vel_y, commands.ang_vel_z]
        sliders = []
        with gui.add_folder("Command (base frame)"):
            for name, (low, high) in zip(("vx", "vy", "wz"), ranges, strict=True):
                low, high = min(low, -abs(high)), max(high, abs(low))
                sliders.append(gui.add_slider(name, min=low, max=high, step=0.05, initial_value=0.0))
        for slider in sliders:
            slider.on_update(lambda _: self._request("command", tuple(float(s.value) for s in sliders)))
        return sliders

    def _add_reward_plot(self, gui: Any) -> Any:
        if not self._terms:
            return None
        x = np.zeros(1)
        with gui.add_folder("Reward terms (followed env, per step)"):
            return gui.add_uplot(
                data=(x, *(np.zeros(1) for _ in self._terms)),
                series=(
                    {"label": "step"},
                    *({"label": t, "stroke": _colour(i)} for i, t in enumerate(self._terms)),
                ),
                scales={"x": {"time": False}},
                aspect=1.4,
            )

    # ------------------------------------------------------------------ the evaluation's hook (main thread)
    def show(self) -> bool:
        """Carry out the page's requests, draw, and wait for the next step's time; False once the user stops."""
        self._apply_requests()
        self._draw()
        self._record_rewards()
        self.steps += 1
        while True:
            with self._lock:
                paused, step_once = self._paused, self._requests.pop("step", False)
            if self._stop or not paused or step_once:
                break
            self._apply_requests()  # a reset or a command still reaches a paused simulation
            time.sleep(0.05)
            self._next = time.perf_counter()
        self._pace()
        return not self._stop

    def _apply_requests(self) -> None:
        with self._lock:
            requests = {
                k: self._requests.pop(k)
                for k in ("stop", "reset", "command", "checkpoint")
                if k in self._requests
            }
        if requests.get("stop"):
            self._stop = True
        if "command" in requests:
            self.set_command(*requests["command"])
        if "checkpoint" in requests:
            self._switch_policy(requests["checkpoint"])
        if requests.get("reset"):
            self.env.reset()
            self.reset()  # every episode starts anew: so does a recurrent policy's memory
            self._previous_sums = None
            print("viewer: reset every environment", flush=True)
            self._draw()

    def set_command(self, vx: float, vy: float, wz: float) -> None:
        """Command (vx, vy, wz) in every environment, now and at every later redraw."""
        if hasattr(self.env, "fix_commands"):  # a built env's draw ranges follow its config there
            self.env.fix_commands(vx, vy, wz)
        else:
            self.env.cfg.commands.fix(vx, vy, wz)
        value = self.env.commands.new_tensor([vx, vy, wz])
        if float(value[:2].norm()) < self.env.cfg.commands.min_speed:
            value[:2] = 0.0  # as the task's own draw would: too slow to walk
        self.env.commands.copy_(value.expand_as(self.env.commands))
        now = self.env.commands[0].tolist()
        print(f"viewer: command (vx, vy, wz) = ({now[0]:.2f}, {now[1]:.2f}, {now[2]:.2f})", flush=True)

    def _switch_policy(self, name: str) -> None:
        assert self._load_policy is not None
        try:
            self.policy = self._load_policy(self._checkpoints[name])
        except Exception as exc:  # a broken file: say so on the page and in the log, keep the current policy
            message = (
                f"viewer: cannot load {name}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
            )
            print(message, flush=True)
            self.server.add_notification("checkpoint", message, color="red")
            return
        print(f"viewer: policy now {name}", flush=True)

    def __call__(self, obs: Any) -> Any:
        """The evaluation's policy: whichever checkpoint the page chose last (a new one starts from a zero state)."""
        return self.policy(obs)

    def reset(self, dones: Any = None) -> None:
        """A recurrent policy's hidden state, reset as the evaluation resets environments."""
        reset = getattr(self.policy, "reset", None)
        if reset is not None:
            reset(dones)

    def _draw(self) -> None:
        self.view.draw()
        self.speed = float(self._speed.value)
        self._status.content = self._status_text()

    def _status_text(self) -> str:
        i = self.scene.env_idx
        time_s = float(self.env.sim.data_view("time")[i])
        parts = [f"**step** {self.steps} · **sim time** {time_s:.2f} s · **speed** {self.speed:g}x"]
        if self._paused:
            parts.append("**paused**")
        if self._command_sliders:
            vx, vy, wz = self.env.commands[i].tolist()
            parts.append(f"**command** vx {vx:.2f} vy {vy:.2f} wz {wz:.2f}")
        return "  \n".join(parts)

    def _record_rewards(self) -> None:
        if self._plot is None:
            return
        i = self.scene.env_idx
        sums = self.env._episode_sums[:, i].detach().cpu().numpy().copy()
        previous = self._previous_sums if self._previous_sums is not None else np.zeros_like(sums)
        self._previous_sums = sums
        if int(self.env.episode_length_buf[i]) == 0:  # just reset: the sums were zeroed with the episode
            return
        step_terms = sums - previous
        self._history.append((self.steps, *step_terms))
        if self.steps % PLOT_EVERY == 0 and len(self._history) > 1:
            columns = np.asarray(self._history, dtype=np.float64).T
            self._plot.data = tuple(columns)

    def _pace(self) -> None:
        self._next += float(self.env.step_dt) / max(self.speed, 1e-3)
        delay = self._next - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        else:  # slower than the requested speed: as fast as possible, without catching up later
            self._next = time.perf_counter()

    def close(self) -> None:
        self.view.close()


def _colour(i: int) -> str:
    palette = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")
    return palette[i % len(palette)]
