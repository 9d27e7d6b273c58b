"""The console scripts as a user runs them, real simulator: each script once as a real process (the exit status a
shell sees); what only depends on its arguments, through its `main` in this process."""

import json
import os
import pathlib
import subprocess

import pytest
import torch
import yaml
from conftest import CARTPOLE_RUN
from helpers import assert_one_line_usage_error, assert_usage_exit, metrics, run_cli


def run_main(command: str, *args: str, capsys) -> tuple[int, str, str]:
    """`main` of a console script in this process: (exit status, stdout, stderr)."""
    import importlib

    capsys.readouterr()
    try:
        importlib.import_module(f"mjfleet.cli.{command}").main(list(args))
        code = 0
    except SystemExit as exit_info:
        code = exit_info.code or 0
    out, err = capsys.readouterr()
    return code, out, err


def test_tasks_lists_every_task_with_a_description_and_its_cpu_defaults(capsys):
    from mjfleet.tasks import get_task

    code, out, _ = run_main("tasks", capsys=capsys)
    assert code == 0
    assert "Cartpole-Balance" in out and "Cartpole-Swingup" in out
    assert "pole" in out
    quadruped = get_task("Quadruped-Velocity-Flat")
    (line,) = [line for line in out.splitlines() if line.startswith("Quadruped-Velocity-Flat ")]
    assert f"envs: {quadruped.num_envs_cpu} CPU / {quadruped.num_envs_gpu} GPU" in line
    assert f"CPU workers: {quadruped.cpu_workers}]" in line


def test_train_help_lists_the_tasks(capsys):
    code, out, _ = run_main("train", "--help", capsys=capsys)
    assert code == 0
    assert "Cartpole-Swingup" in out


def test_train_task_help_lists_that_tasks_env_and_agent_flags(capsys):
    code, out, _ = run_main("train", "Cartpole-Swingup", "--help", capsys=capsys)
    assert code == 0
    for flag in (
        "--env.num-envs",
        "--env.swingup",
        "--agent.max-iterations",
        "--agent.ppo.learning-rate",
        "--gpu-ids",
        "--cpu-workers",
        "--num-envs",
        "--seed",
        "--max-iterations",
    ):
        assert flag in out, flag


@pytest.mark.parametrize("command", ["train", "play", "bench"])
def test_help_of_a_task_that_takes_a_robot_needs_no_robot(command, capsys):
    """`<command> Velocity-Flat --help` lists the task's flags over an example robot's defaults and says so; without
    --help the same command still asks for --robot (tests/test_robot_file.py)."""
    from mjfleet.tasks import task_names

    code, out, err = run_main(command, "Velocity-Flat", "--help", capsys=capsys)
    assert code == 0, err
    assert f"usage: {command} Velocity-Flat" in out and "--robot" in out
    assert "--env.commands.lin-vel-x" in out and "Defaults shown: those of a Unitree Go1" in " ".join(
        out.split()
    )
    assert not any(name.startswith("Velocity-Flat:") for name in task_names())  # nothing registered for it


def test_unknown_task_names_the_closest_tasks():
    assert_one_line_usage_error(run_cli("train", "Cartpole-Balanse"), "unknown task", "Cartpole-Balance")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        pytest.param(
            ["--gpu-ids", "0"],
            "--gpu-ids None",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="GPU 0 exists here: it would train"),
        ),
        (["--gpu-ids", "-1"], "-1"),
        (["--num-envs", "0"], "--num-envs"),
        (["--gpu-ids", "None", "--cpu-workers", "0"], "--cpu-workers"),
        (["--max-iterations", "0"], "--max-iterations"),
        (["--max-env-steps", "0"], "--max-env-steps"),
        (["--env.penalty-curriculum-start", "1.5"], "--env.penalty-curriculum-start"),
        (["--env.penalty-curriculum-steps", "-1"], "--env.penalty-curriculum-steps"),
        (["--env.penalty-curriculum-delay", "-1"], "-delay"),
        (["--agent.ppo.grad-sync-period", "5"], "--agent.ppo.grad-sync-period"),
        (["--agent.ppo.grad-sync-period", "0"], "--agent.ppo.grad-sync-period"),
        # the old spelling of PPO's group reaches the same setting
        (["--agent.algorithm.grad-sync-period", "0"], "--agent.ppo.grad-sync-period"),
        (["--run-name", "a/b"], "--run-name"),
        (["--gpu-ids", "None", "--logs-root", "/proc/no-such-dir"], "cannot create the run directory"),
    ],
)
def test_bad_values_are_one_line_errors_with_exit_status_2(args, needle, tmp_path, monkeypatch, capsys):
    from mjfleet.cli.train import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["Cartpole-Balance", *args])
    assert_usage_exit(exit_info, capsys.readouterr().err, needle)
    assert not (tmp_path / "logs").exists()


def test_train_writes_a_complete_run_directory(cartpole_run):
    _, run_dir, result, records = cartpole_run
    c = CARTPOLE_RUN
    assert run_dir.name.endswith("_shared")  # --run-name
    saved = [f"model_{i}.pt" for i in range(c["save_interval"], c["iterations"], c["save_interval"])]
    assert len(saved) >= 2 and {*saved, f"model_{c['iterations']}.pt", "metrics.jsonl"} <= {
        p.name for p in run_dir.iterdir()
    }
    env_cfg = yaml.safe_load((run_dir / "params" / "env.yaml").read_text())
    agent_cfg = yaml.safe_load((run_dir / "params" / "agent.yaml").read_text())
    assert env_cfg["num_envs"] == c["num_envs"] and agent_cfg["max_iterations"] == c["iterations"]
    versions = yaml.safe_load((run_dir / "params" / "versions.yaml").read_text())
    assert versions["rsl-rl-lib"] == "5.5.1" and versions["warp-lang"] == "1.19.0"
    assert not (run_dir / "params" / "git.yaml").exists()  # the fixture's directory is in no git repository
    assert (
        len(records) == c["iterations"]
        and records[-1]["env_steps"] == c["iterations"] * c["steps"] * c["num_envs"]
    )
    summary = result.stdout.strip().splitlines()[-1]
    assert summary.startswith(f"done: {c['iterations']} iterations") and str(run_dir) in summary


def test_the_same_seed_trains_the_same_policy_and_another_seed_another(tmp_path, monkeypatch):
    """`--seed` makes a run repeatable on one machine (CPU, one thread: the same summation order)."""
    from mjfleet.cli.train import main
    from mjfleet.runs.checkpoints import read_checkpoint

    monkeypatch.chdir(tmp_path)
    tiny = ["--gpu-ids", "None", "--threads", "1", "--num-envs", "16", "--max-iterations", "2",
            "--agent.num-steps-per-env", "8", "--logger", "none", "--log-format", "compact"]  # fmt: skip
    runs = {}
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        main(["Cartpole-Balance", *tiny, "--seed", str(seed), "--run-name", name])
        (run_dir,) = (tmp_path / "logs" / "cartpole_balance").glob(f"*_{name}")
        state = read_checkpoint(run_dir / "model_2.pt")
        runs[name] = (state["actor_state_dict"], [m["mean_return"] for m in metrics(run_dir)])
    (actor_a, returns_a), (actor_b, returns_b), (actor_c, _) = runs["a"], runs["b"], runs["c"]
    assert all(torch.equal(actor_a[k], actor_b[k]) for k in actor_a) and returns_a == returns_b
    assert not all(torch.equal(actor_a[k], actor_c[k]) for k in actor_a)


@pytest.mark.parametrize(
    ("modules", "needle"),
    [("pendlum", "'pendlum', which is not importable"), ("pendulum,pendulum_copy", "registered twice")],
)
def test_a_bad_task_module_in_the_environment_is_one_line(modules, needle, tmp_path):
    examples = pathlib.Path(__file__).parent.parent / "examples"
    # The same file under a second name registers its task a second time.
    (tmp_path / "pendulum_copy.py").write_text((examples / "pendulum.py").read_text())
    pythonpath = f"{examples}{os.pathsep}{tmp_path}"
    result = run_cli("tasks", timeout=120, env={"MJFLEET_TASK_MODULES": modules, "PYTHONPATH": pythonpath})
    assert_one_line_usage_error(result, needle)


@pytest.mark.parametrize(
    ("command", "needles"),
    [
        (
            ["train", "Cartpole-Balance", "--num-env", "8"],
            ["--num-env", "did you mean --env.num-envs or --num-envs?"],
        ),
        (
            ["train", "Cartpole-Balance", "--num-envs", "abc"],
            ["--num-envs", "'abc'", "train Cartpole-Balance --help"],
        ),
        (
            ["train", "Cartpole-Balance", "--log-format", "foo"],
            ["'foo'", "--log-format", "'block', 'compact'"],
        ),
        (["play", "Cartpole-Balance", "--agent", "foo"], ["--agent 'foo'", "checkpoint, random, zero"]),
        (["plot", "--bogus", "x"], ["--bogus"]),
    ],
)
def test_a_flag_tyro_cannot_parse_is_one_line_not_a_box(command, needles, capsys):
    code, out, err = run_main(*command, capsys=capsys)
    assert_one_line_usage_error(subprocess.CompletedProcess(command, code, out, err), *needles)


# --- tasks and plot: bad input is one line and exit status 2 too ----------------------------------------


def test_tasks_with_an_argument_is_one_line_not_a_usage_box():
    result = run_cli("tasks", "foo", timeout=120)
    assert_one_line_usage_error(result, "tasks: error: Unrecognized options: foo", "train <Task> --help")
    assert "usage:" not in result.stderr and "╭" not in result.stderr


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["foo"], ["Unrecognized options: foo:", "`tasks` takes none"]),
        (["--bogus", "x"], ["Unrecognized options: --bogus, x:", "`tasks` takes none"]),
    ],
)
def test_bad_tasks_input_is_one_line(args, needles, capsys):
    code, out, err = run_main("tasks", *args, capsys=capsys)
    assert_one_line_usage_error(subprocess.CompletedProcess(args, code, out, err), "tasks: error:", *needles)
    assert out == ""


def test_tasks_help_says_what_the_list_holds(capsys):
    code, out, _ = run_main("tasks", "--help", capsys=capsys)
    assert code == 0
    assert out.startswith("usage: tasks [-h]") and "default environment counts" in out


PLOT_BAD_INPUT = [
    ([], ["name at least one run directory"]),
    (["{tmp}/missing"], ["missing does not exist", "pass a run directory"]),
    (["{tmp}/not_records"], ["not_records: not a metrics.jsonl", "list, not a record"]),
    (["{tmp}/run", "--output", "{tmp}"], ["is a directory", "reward_curve.png"]),
    (["{tmp}/run", "--output", "{tmp}/curve.foo"], ["names no image format", "use .png"]),
    (["{tmp}/run", "--output", "{tmp}/curve"], ["names no image format"]),
    (["{tmp}/run", "--output", "{tmp}/a_file/curve.png"], ["cannot write", "a_file/curve.png"]),
]


@pytest.mark.parametrize(("args", "needles"), PLOT_BAD_INPUT)
def test_bad_plot_input_is_one_line(args, needles, tmp_path, capsys):
    (tmp_path / "run").mkdir()
    record = {"iteration": 1, "env_steps": 256, "mean_return": 1.0, "mean_episode_length": 10.0}
    (tmp_path / "run" / "metrics.jsonl").write_text(f"{json.dumps(record)}\n")
    (tmp_path / "not_records").mkdir()
    (tmp_path / "not_records" / "metrics.jsonl").write_text("[1, 2]\n")
    (tmp_path / "a_file").write_text("")
    args = [arg.format(tmp=tmp_path) for arg in args]
    code, out, err = run_main("plot", *args, capsys=capsys)
    assert_one_line_usage_error(subprocess.CompletedProcess(args, code, out, err), "plot: error:", *needles)
    assert not list(tmp_path.rglob("*.png")) and not list(tmp_path.rglob("*.foo"))


# --- short aliases: one table, one rule ----------------------------------------------------------------


def _help_entries(module, capsys) -> dict[str, str]:
    """`<command> Cartpole-Balance --help` as {flag: its help text}."""
    with pytest.raises(SystemExit):
        module.parse_args(["Cartpole-Balance", "--help"])
    entries: dict[str, str] = {}
    flag = None
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("  --"):
            flag = line.split()[0]
            entries[flag] = ""
        elif flag is not None:
            entries[flag] += " " + line.strip()
    return entries


@pytest.mark.parametrize("command", ["train", "play", "bench"])
def test_every_alias_flag_is_in_the_one_alias_table_and_names_its_nested_flag(command, capsys):
    import importlib

    from mjfleet.cli.aliases import ALIASES

    module = importlib.import_module(f"mjfleet.cli.{command}")
    entries = _help_entries(module, capsys)
    declared = {flag for flag, text in entries.items() if "(alias of --" in text}
    assert declared, entries.keys()
    for flag in declared:
        target = ALIASES[flag[2:].replace("-", "_")]  # e.g. agent.algorithm_name, agent.distillation.teacher
        assert f"(alias of --{target.replace('_', '-')}" in entries[flag]
    assert {f"--{alias.replace('_', '-')}" for alias in ALIASES} & set(entries) == declared


@pytest.mark.parametrize("command", ["train", "play", "bench"])
@pytest.mark.parametrize("order", ["alias first", "alias last"])
def test_a_short_alias_given_wins_over_its_nested_flag_in_every_command(command, order):
    import importlib

    module = importlib.import_module(f"mjfleet.cli.{command}")
    args = [["--num-envs", "4"], ["--env.num-envs", "8"]]
    if command != "bench":
        args += [["--seed", "5"], ["--agent.seed", "9"]]
    if order == "alias last":
        args.reverse()
    _, flags = module.parse_args(["Cartpole-Balance", *(a for pair in args for a in pair)])
    if command == "bench":
        assert module.resolve("Cartpole-Balance", flags)[1] == [4]
    else:
        assert flags.env.num_envs == 4
        assert flags.agent.seed == 5


@pytest.mark.parametrize("command", ["train", "play", "bench"])
def test_the_nested_flag_alone_is_used_in_every_command(command):
    import importlib

    module = importlib.import_module(f"mjfleet.cli.{command}")
    _, flags = module.parse_args(["Cartpole-Balance", "--env.num-envs", "8"])
    if command == "bench":
        assert module.resolve("Cartpole-Balance", flags)[1] == [8]
    else:
        assert flags.env.num_envs == 8


def test_max_env_steps_becomes_the_iterations_that_reach_it_over_all_workers(capsys):
    from mjfleet.cli.train import parse_args
    from mjfleet.launch.devices import make_plan, parse_gpu_ids
    from mjfleet.train.job import resolve as resolve_job

    argv = [
        "Cartpole-Balance",
        "--num-envs",
        "10",
        "--agent.num-steps-per-env",
        "8",
        "--max-env-steps",
        "1001",
    ]
    _, flags = parse_args(argv)
    plan = make_plan(parse_gpu_ids(["None"]), cpu_workers=2)
    job = resolve_job("Cartpole-Balance", flags, plan)
    assert job.agent.max_iterations == 7  # 160 env steps per iteration: 6 reach 960, 7 reach 1,120 >= 1,001
    assert (
        "--max-env-steps 1,001: 7 iterations of 160 env steps (2 workers x 10 envs x 8 steps)"
        in capsys.readouterr().out
    )


# --- mjlab's spellings: one line that names mjfleet's flag; `--task X` is the positional task ---------------------


@pytest.mark.parametrize(
    ("command", "args", "needles"),
    [
        (
            "train",
            ["--env.scene.num-envs", "4096"],
            ["--env.scene.num-envs 4096` is mjlab's", "--num-envs 4096"],
        ),
        ("bench", ["--env.scene.num-envs=64"], ["--num-envs 64", "--env.num-envs 64"]),
        ("train", ["--agent.resume", "True"], ["--agent.resume True", "mjfleet's is --resume"]),
        ("play", ["--video", "True"], ["--video True", "mjfleet's is --video, a switch with no value"]),
        ("play", ["--checkpoint-file", "logs/x/model_5.pt"], ["mjfleet's is --checkpoint logs/x/model_5.pt"]),
        ("play", ["--device", "cuda:1"], ["--device cuda:1", "mjfleet's is --gpu-ids 1"]),
        ("train", ["--device", "cpu"], ["mjfleet's is --gpu-ids None"]),
        ("train", ["--agent.load-checkpoint", "model_100.pt"], ["mjfleet's is --checkpoint 100"]),
        ("train", ["--agent.load-run", "2026-05-01"], ["mjfleet's is --load-run 2026-05-01"]),
        ("play", ["--log-root", "/tmp/l"], ["mjfleet's is --logs-root /tmp/l"]),
        (
            "play",
            ["--wandb-checkpoint-name", "model_40.pt"],
            ["mjfleet's is --checkpoint 40, with --wandb-run-path"],
        ),
    ],
)
def test_an_mjlab_spelling_is_one_line_naming_mjfleets_flag(
    command, args, needles, monkeypatch, capsys, tmp_path
):
    import importlib

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MUJOCO_GL", os.environ.get("MUJOCO_GL", "egl"))  # play --video picks it otherwise
    main = importlib.import_module(f"mjfleet.cli.{command}").main
    with pytest.raises(SystemExit) as exit_info:
        main(["Cartpole-Balance", "--gpu-ids", "None", *args])
    assert_usage_exit(exit_info, capsys.readouterr().err, *needles)
    assert not (tmp_path / "logs").exists()


def test_plain_video_and_viewer_switches_are_not_taken_for_mjlabs_spelling():
    from mjfleet.cli.aliases import mjlab_flag_hint

    assert mjlab_flag_hint(["--video", "--video-length", "100"]) is None
    assert mjlab_flag_hint(["--viewer", "--episodes", "2"]) is None
    assert mjlab_flag_hint(["--num-envs", "8"]) is None


@pytest.mark.parametrize("command", ["train", "play", "bench"])
@pytest.mark.parametrize("spelling", [["--task", "Cartpole-Swingup"], ["--task=Cartpole-Swingup"]])
def test_task_flag_is_the_positional_task_in_every_command(command, spelling):
    import dataclasses
    import importlib

    parse_args = importlib.import_module(f"mjfleet.cli.{command}").parse_args
    as_flag = parse_args(["--num-envs", "8", *spelling, "--agent.seed", "3"])
    positional = parse_args(["Cartpole-Swingup", "--num-envs", "8", "--agent.seed", "3"])
    assert as_flag[0] == positional[0] == "Cartpole-Swingup"
    assert dataclasses.asdict(as_flag[1]) == dataclasses.asdict(positional[1])


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (
            ["Cartpole-Balance", "--task", "Cartpole-Swingup"],
            ["two tasks given", "Cartpole-Balance", "Cartpole-Swingup"],
        ),
        (["--task"], ["--task needs a task name"]),
        (["Mjlab-Velocity-Flat-Unitree-G1"], ["is an mjlab task", "Humanoid-Velocity-Flat"]),
        (["--task", "Mjlab-Velocity-Rough-Unitree-Go1"], ["is an mjlab task", "Quadruped-Velocity-Rough"]),
        (["Mjlab-Lift-Cube-Yam"], ["is an mjlab task", "no counterpart", "uv run tasks"]),
    ],
)
def test_task_given_twice_or_as_mjlabs_name_is_one_line(argv, needles, capsys):
    from mjfleet.cli.train import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert_usage_exit(exit_info, capsys.readouterr().err, *needles)


def test_the_old_spelling_of_ppos_flags_is_read_as_the_new_one():
    from mjfleet.cli.aliases import renamed_flags

    old = [
        "--agent.algorithm.learning-rate",
        "3e-4",
        "--agent.algorithm.no-tf32",
        "--agent.algorithm-name",
        "ppo",
    ]
    assert renamed_flags(old) == [
        "--agent.ppo.learning-rate",
        "3e-4",
        "--agent.ppo.no-tf32",
        "--agent.algorithm-name",
        "ppo",
    ]
    # the switch of the update engine the compiled loss replaced switches that
    assert renamed_flags(["--agent.algorithm.no-fast-update"]) == ["--agent.ppo.no-compile-update"]
