"""Cartpole-Balance and Cartpole-Swingup."""

from typing import TYPE_CHECKING

from mjfleet.lazy import lazy_exports
from mjfleet.rl.config import ActorConfig, AgentConfig, PolicyConfig, PPOConfig
from mjfleet.rl.sac import SACConfig
from mjfleet.tasks.cartpole.config import CartpoleConfig, CartpoleRewards
from mjfleet.tasks.registry import TaskSpec, register

if TYPE_CHECKING:
    from mjfleet.tasks.cartpole.env import CartpoleEnv

# By name: the simulator is imported when an environment is built, not when the task is registered.
ENV_CLASS = "mjfleet.tasks.cartpole.env:CartpoleEnv"


def _agent(experiment: str, max_iterations: int) -> AgentConfig:
    return AgentConfig(
        experiment_name=experiment,
        num_steps_per_env=24,
        max_iterations=max_iterations,
        save_interval=50,
        actor=ActorConfig(hidden_dims=(64, 64), init_noise_std=1.0),
        critic=PolicyConfig(hidden_dims=(64, 64)),
        ppo=PPOConfig(learning_rate=1e-3, entropy_coef=0.005, num_mini_batches=4, num_learning_epochs=5),
        # --algorithm sac: a 5-number state needs small networks; batches of 1024 keep a gradient step cheap
        # on a CPU core while still averaging over many environments' data. Two gradient steps per env step:
        # measured on the 2-core CPU (docs/sac.md), one step per env step had reached 207.7 of 250 after 150
        # iterations where two reached 247.8.
        sac=SACConfig(
            batch_size=1024,
            updates_per_step=2.0,
            actor_hidden_dims=(64, 64),
            critic_hidden_dims=(128, 128),
        ),
    )


register(
    TaskSpec(
        name="Cartpole-Balance",
        description="Keep a pole upright on a cart that moves along a rail (starts near upright).",
        env_class=ENV_CLASS,
        env_config=lambda: CartpoleConfig(swingup=False, episode_length_s=5.0),
        agent_config=lambda: _agent("cartpole_balance", max_iterations=150),
    )
)
register(
    TaskSpec(
        name="Cartpole-Swingup",
        description="Swing a hanging pole up by moving the cart, then balance it upright.",
        env_class=ENV_CLASS,
        env_config=lambda: CartpoleConfig(
            swingup=True,
            episode_length_s=8.0,
            end_stops=True,
            rewards=CartpoleRewards(
                upright=0.0, centered=0.0, small_control=0.0, small_velocity=0.0, upright_product=1.0
            ),
        ),
        agent_config=lambda: _agent("cartpole_swingup", max_iterations=300),
    )
)

__getattr__ = lazy_exports(__name__, {"CartpoleEnv": ENV_CLASS})


__all__ = ["CartpoleConfig", "CartpoleEnv", "CartpoleRewards"]
