"""Distillation: a student that learns to act as a trained teacher acts, the third `Algorithm` beside PPO and SAC.

DAgger-style, as rsl_rl's `Distillation`: the student drives the environments, and at every step the frozen
teacher (a PPO or SAC checkpoint of the same task, reading the observation groups it was trained on) labels the
observation with its deterministic action. An iteration's update fits the student's actions to those labels (MSE
or Huber) over the rollout in time order, one averaged gradient step per `gradient_length` steps, so a recurrent
student (`--agent.actor.rnn`) learns by truncated backpropagation through time; the averaged step, its reducer
and the workers' exchanges are `AveragedGradients`, as for PPO and SAC.

A recurrent student is replayed in the update from the hidden state it had when the rollout began (not from the
state after the previous update's replay, as rsl_rl does), and acting continues afterwards from the state the
rollout ended in. Checkpoints hold the student as `actor_state_dict` with rsl_rl's network config, so `play`,
evaluation and export treat it as any actor, and the teacher's own checkpoint entries, so a resumed run needs
no teacher file.
"""

from __future__ import annotations

import pathlib
from typing import Any

import torch
from tensordict import TensorDict

from mjfleet.errors import UsageError, first_line
from mjfleet.rl.config import AgentConfig, DistillationConfig
from mjfleet.rl.gradients import AveragedGradients
from mjfleet.rl.normalizer import model_normalizer_input

ALGORITHM = "distillation"
TEACHER_KEYS = ("algorithm", "actor_state_dict", "rsl_rl_cfg", "agent_cfg", "infos")
"""What a checkpoint keeps of its teacher: enough for `actor_from_checkpoint` to rebuild it."""


class FleetDistillation:
    """The student, the frozen teacher, the rollout storage and the student's averaged step."""

    name = ALGORITHM

    def __init__(
        self,
        student,
        student_cfg: dict,
        teacher,
        teacher_state: dict,
        storage,
        cfg: DistillationConfig,
        device: str,
    ) -> None:
        self.student, self.teacher, self.storage, self.cfg = student, teacher, storage, cfg
        self.student_cfg = student_cfg
        """rsl_rl's config of the student (checkpoints keep it: play rebuilds the student from it)."""
        self.teacher_state = teacher_state
        self.device = device
        self.teacher.requires_grad_(False)
        self.teacher.eval()
        self.gradients = AveragedGradients(
            {"student": student.parameters()}, torch.optim.Adam(student.parameters(), lr=cfg.learning_rate)
        )
        self.optimizer = self.gradients.optimizer
        self.loss_fn = torch.nn.functional.mse_loss if cfg.loss == "mse" else torch.nn.functional.huber_loss
        self.transition = storage.Transition()
        self._rollout_start_state = None
        self._rollout_started = False

    # -------------------------------------------------------------- acting
    def act(self, obs: TensorDict) -> torch.Tensor:
        """The student's action (it drives); the teacher's for the same observation is stored as its label."""
        if not self._rollout_started:  # the state a recurrent student's update replays the rollout from
            self._rollout_start_state = _clone(self.student.get_hidden_state())
            self._rollout_started = True
        t = self.transition
        t.actions = self.student(obs).detach()
        t.privileged_actions = self.teacher(obs).detach()
        t.observations = obs
        return t.actions

    def process_env_step(self, obs, rewards, dones, extras) -> None:
        t = self.transition
        t.rewards, t.dones = rewards, dones
        self.storage.add_transition(t)
        t.clear()
        self.student.reset(dones)
        self.teacher.reset(dones)

    # ------------------------------------------------------------ learning
    def update(self, obs: TensorDict | None = None) -> dict[str, float]:
        """Fit the student to the teacher's labels over the rollout, in time order, `num_learning_epochs` times;
        returns the mean behaviour loss. The student's normaliser then learns the rollout's observations."""
        grads, student = self.gradients, self.student
        acting_state = student.get_hidden_state()
        total, count = torch.zeros((), device=self.device), 0
        for _ in range(self.cfg.num_learning_epochs):
            student.reset(hidden_state=_clone(self._rollout_start_state))
            loss, steps = 0.0, 0
            for batch in self.storage.generator():
                step_loss = self.loss_fn(student(batch.observations), batch.privileged_actions)
                loss, steps = loss + step_loss, steps + 1
                total += step_loss.detach()
                count += 1
                if steps == self.cfg.gradient_length:
                    self._step(loss)
                    loss, steps = 0.0, 0
                student.reset(batch.dones.view(-1))
            if steps:
                self._step(loss)
        if student.obs_normalization:
            flat = self.storage.observations.flatten(0, 1)
            grads.update_normalizer(student.obs_normalizer, model_normalizer_input(student, flat))
        student.reset(hidden_state=acting_state)  # acting goes on where the rollout ended
        self.storage.clear()
        self._rollout_started = False
        return {"behavior": float(total / max(count, 1))}

    def _step(self, loss: torch.Tensor) -> None:
        grads = self.gradients
        grads.zero_()
        loss.backward()
        grads.average()
        if self.cfg.max_grad_norm > 0:
            grads.clip(self.cfg.max_grad_norm)
        grads.step()
        self.student.detach_hidden_state()

    def record(self) -> dict[str, Any]:
        return {"learning_rate": self.cfg.learning_rate, "Policy/action_std": 0.0}  # a deterministic student

    @property
    def mini_batch_size(self) -> int:
        return self.storage.num_envs * self.cfg.gradient_length

    def describe(self) -> str:
        student = "recurrent" if self.student.is_recurrent else "MLP"
        teacher = self.teacher_state.get("algorithm", "ppo")
        parts = [
            f"distillation: {student} student on {', '.join(self.student.obs_groups)} from a {teacher} teacher "
            f"({', '.join(self.teacher.obs_groups)}), a gradient step every {self.cfg.gradient_length} env steps"
        ]
        return "; ".join(parts + self.gradients.describe("gradient step"))

    # ------------------------------------------------------------- workers
    def broadcast_parameters(self) -> None:
        self.gradients.broadcast(self.student)

    def consistency_tensors(self):
        return self.student.parameters()

    # --------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        return {
            "actor_state_dict": self.student.state_dict(),
            "optimizer_state_dict": self.optimizer.state_dict(),
            "rsl_rl_cfg": self.student_cfg,
            "teacher": self.teacher_state,
        }

    def load_state_dict(self, state: dict[str, Any], strict: bool = True) -> None:
        self.student.load_state_dict(state["actor_state_dict"], strict=strict)
        self.optimizer.load_state_dict(state["optimizer_state_dict"])
        for group in self.optimizer.param_groups:  # this run's learning rate (its flags win)
            group["lr"] = self.cfg.learning_rate

    # -------------------------------------------------------------- policy
    def get_policy(self):
        return self.student

    def train_mode(self) -> None:
        self.student.train()
        self.teacher.eval()

    def eval_mode(self) -> None:
        self.student.eval()
        self.teacher.eval()


def _clone(state):
    """A copy of a hidden state (None, a tensor, or an LSTM's pair) outside inference mode."""
    if state is None:
        return None
    if isinstance(state, tuple):
        return tuple(s.clone() for s in state)
    return state.clone()


def load_teacher(path: str, task: str | None) -> dict[str, Any]:
    """The checkpoint entries of the teacher `path` names (a checkpoint, a run directory's latest, or a
    distillation checkpoint's own teacher); its task must be `task`. UsageError (one line) otherwise."""
    from mjfleet.runs.checkpoints import checkpoints_in, read_checkpoint

    if not path:
        raise UsageError("--algorithm distillation needs --teacher <checkpoint or run directory>")
    checkpoint = pathlib.Path(path)
    if checkpoint.is_dir():
        found = checkpoints_in(checkpoint)
        if not found:
            raise UsageError(f"--teacher {path}: no checkpoint in that run directory")
        checkpoint = found[-1][1]
    state = read_checkpoint(checkpoint, map_location="cpu")
    if state.get("algorithm") == ALGORITHM:
        state = state["teacher"]
    trained_on = (state.get("infos") or {}).get("task")
    if task and trained_on and trained_on != task:
        raise UsageError(f"teacher {checkpoint} was trained on {trained_on}, not {task}")
    return {key: state[key] for key in TEACHER_KEYS if key in state}


def build_distillation(obs: TensorDict, env, agent: AgentConfig, ctx) -> FleetDistillation:
    """The student (`agent.actor`'s network on `student_obs`), the teacher from `agent.distillation.teacher`, and
    the rollout storage, on `ctx.device`, averaging across `ctx`'s workers."""
    from rsl_rl.models import MLPModel, RNNModel
    from rsl_rl.storage import RolloutStorage

    from mjfleet.rl.algorithm import actor_from_checkpoint
    from mjfleet.rl.build import select_observations

    cfg = agent.distillation
    agent.check(env.num_envs)
    student_obs = cfg.student_obs or (("policy",) if "policy" in obs.keys() else ("actor",))
    missing = [group for group in student_obs if group not in obs.keys()]
    if missing:
        raise UsageError(
            f"--agent.distillation.student-obs: no observation group {missing}; the env has {list(obs.keys())}"
        )
    device = ctx.device
    teacher_state = load_teacher(cfg.teacher, None)  # its task is checked by the job that names the task
    try:
        teacher = actor_from_checkpoint(teacher_state, obs, env.num_actions, device)
    except (RuntimeError, KeyError, ValueError) as exc:
        raise UsageError(
            f"teacher {cfg.teacher} does not fit this task's policy: {first_line(exc)}"
        ) from None
    recurrence = agent.actor_recurrence()
    groups = {"actor": list(student_obs)}
    obs = select_observations(env, obs, [*student_obs, *teacher.obs_groups])
    network = {
        "hidden_dims": list(agent.actor.hidden_dims),
        "activation": agent.actor.activation,
        "obs_normalization": agent.actor.obs_normalization,
        **recurrence,
    }
    student = (RNNModel if recurrence else MLPModel)(obs, groups, "actor", env.num_actions, **network).to(
        device
    )
    storage = RolloutStorage(
        "distillation", env.num_envs, agent.num_steps_per_env, obs, [env.num_actions], device
    )
    student_cfg = {
        "obs_groups": groups,
        "actor": {"class_name": "RNNModel" if recurrence else "MLPModel", **network},
    }
    alg = FleetDistillation(student, student_cfg, teacher, teacher_state, storage, cfg, device)
    alg.gradients.connect(cfg.gradient_reducer, ctx)
    return alg
