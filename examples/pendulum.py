"""Pendulum-Balance: the task built step by step in docs/adding-a-task.md.

An inverted pendulum: a 1 m pole stands on a motorised hinge and starts slightly off upright. The policy
commands the hinge torque to keep it up; the episode ends early if the pole tips past 60 degrees. Register it
without touching mjfleet with

    MJFLEET_TASK_MODULES=pendulum PYTHONPATH=examples uv run train Pendulum-Balance
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mujoco
import torch

from mjfleet.envs import EnvConfig, MujocoVecEnv
from mjfleet.rl import ActorConfig, AgentConfig, PolicyConfig
from mjfleet.tasks import TaskSpec, register

# Step 1: the model. MJCF text is enough for a small task; contacts are not needed, so they are disabled, and
# the small damping is integrated explicitly, so mujoco_warp can skip its constraint solver.
PENDULUM_XML = """
<mujoco model="pendulum">
  <option timestep="0.01" integrator="Euler">
    <flag contact="disable" constraint="disable" eulerdamp="disable"/>
  </option>
  <worldbody>
    <body name="pole" pos="0 0 1">
      <joint name="hinge" type="hinge" axis="0 1 0" damping="0.05"/>
      <geom type="capsule" fromto="0 0 0 0 0 1" size="0.04" mass="1"/>
    </body>
  </worldbody>
  <actuator>
    <motor joint="hinge" gear="10" ctrllimited="true" ctrlrange="-1 1"/>
  </actuator>
</mujoco>
"""


# Step 2: the configuration. Reward weights are a dataclass of their own; every field becomes a flag.
@dataclass
class PendulumRewards:
    upright: float = 0.8
    small_control: float = 0.2


@dataclass
class PendulumConfig(EnvConfig):
    episode_length_s: float = 6.0
    init_angle_range: float = 0.3
    """Initial angle from upright, uniform in +-this (rad)."""
    rewards: PendulumRewards = field(default_factory=PendulumRewards)


# Step 3: the environment. Reward terms are plain functions of it, one per field of PendulumRewards ...
def upright(env: PendulumEnv) -> torch.Tensor:
    return 0.5 * (1.0 + torch.cos(env.sim.qpos[:, 0]))  # 1 upright


def small_control(env: PendulumEnv) -> torch.Tensor:
    return torch.exp(-env.actions[:, 0].square())


# ... listed by the names of their weights in the class, beside observations, terminations and resets, all
# batched on the device.
class PendulumEnv(MujocoVecEnv):
    cfg: PendulumConfig
    reward_terms = {"upright": upright, "small_control": small_control}

    def build_model(self) -> mujoco.MjModel:
        return mujoco.MjModel.from_xml_string(PENDULUM_XML)

    def compute_observations(self) -> dict[str, torch.Tensor]:
        angle, velocity = self.sim.qpos[:, 0], self.sim.qvel[:, 0]
        obs = torch.stack((torch.cos(angle), torch.sin(angle), velocity), dim=1)
        return {"actor": obs, "critic": obs}

    def compute_terminations(self) -> torch.Tensor:
        return torch.cos(self.sim.qpos[:, 0]) < 0.5  # tipped past 60 degrees

    def randomize_reset_state(self, mask: torch.Tensor) -> None:
        angle = (torch.rand(self.num_envs, device=self.device) * 2 - 1) * self.cfg.init_angle_range
        self.sim.qpos[:, 0] = torch.where(mask, angle, self.sim.qpos[:, 0])
        self.sim.qvel[:, 0] = torch.where(mask, torch.zeros_like(angle), self.sim.qvel[:, 0])


# Step 4: registration: a name, a description, and default configs that train out of the box.
register(
    TaskSpec(
        name="Pendulum-Balance",
        description="Keep an inverted pendulum upright with a hinge motor (the docs/adding-a-task.md example).",
        env_class=PendulumEnv,
        env_config=PendulumConfig,
        agent_config=lambda: AgentConfig(
            experiment_name="pendulum_balance",
            max_iterations=50,
            actor=ActorConfig(hidden_dims=(32, 32)),
            critic=PolicyConfig(hidden_dims=(32, 32)),
        ),
        num_envs_cpu=256,
    )
)
