"""A task registered by a module named in MJFLEET_TASK_MODULES (tests only): Cartpole under another name."""

from mjfleet.tasks.cartpole import CartpoleConfig, CartpoleEnv, _agent
from mjfleet.tasks.registry import TaskSpec, register

register(
    TaskSpec(
        name="Test-PluginCartpole",
        description="Cartpole, registered by a task module (tests only).",
        env_class=CartpoleEnv,
        env_config=CartpoleConfig,
        agent_config=lambda: _agent("test_plugin", max_iterations=1),
    )
)
