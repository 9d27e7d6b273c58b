"""Specification of --gpu-ids parsing and of the worker plan (devices, backend, hosts, threads)."""

from __future__ import annotations

import pytest
import torch

from mjfleet.errors import UsageError
from mjfleet.fleet.plan import WorkerPlan
from mjfleet.launch import devices
from mjfleet.launch.devices import GpuRequest, make_plan, parse_gpu_ids


@pytest.fixture(autouse=True)
def no_cuda_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


# --- parse_gpu_ids: accepted forms ----------------------------------------------------------------------


def test_absent_flag_means_default():
    assert parse_gpu_ids(None) == GpuRequest("default")


@pytest.mark.parametrize(
    "tokens",
    [["0", "1"], ["[0, 1]"], ["[0,1]"], ["0,1"], ["[0,", "1]"], ["(0, 1)"], ["'0'", "'1'"]],
    ids=["space-separated", "list-with-space", "list", "comma", "list-split-by-shell", "tuple", "quoted"],
)
def test_every_list_form_reads_as_the_same_ids(tokens):
    assert parse_gpu_ids(tokens) == GpuRequest("ids", (0, 1))


def test_ids_keep_their_order():
    assert parse_gpu_ids(["2", "0"]).ids == (2, 0)


@pytest.mark.parametrize("word", ["all", "ALL", "All"])
def test_all_selects_every_gpu(word):
    assert parse_gpu_ids([word]) == GpuRequest("all")


@pytest.mark.parametrize("word", ["None", "none", "cpu", "CPU", "[None]"])
def test_none_and_cpu_select_cpu(word):
    assert parse_gpu_ids([word]) == GpuRequest("cpu")


def test_gpu_and_mig_uuids_stay_strings():
    mig = "MIG-4f7c2a1e-1b2c-5d6e-8f90-123456789abc"
    gpu = "GPU-0b1c2d3e-aaaa-bbbb-cccc-ddddeeeeffff"
    assert parse_gpu_ids([mig, gpu]).ids == (mig, gpu)


# --- parse_gpu_ids: errors ------------------------------------------------------------------------------


def test_negative_id_is_rejected():
    with pytest.raises(UsageError, match="negative"):
        parse_gpu_ids(["-1"])


def test_duplicate_id_is_rejected():
    with pytest.raises(UsageError, match="GPU 1 is listed twice"):
        parse_gpu_ids(["1", "0", "1"])


@pytest.mark.parametrize("token", ["abc", "gpu0", "1.5", "cuda:0"])
def test_garbage_is_rejected_with_the_accepted_forms(token):
    with pytest.raises(UsageError) as err:
        parse_gpu_ids([token])
    message = str(err.value)
    assert repr(token) in message and "`0 1`" in message and "all" in message and "None" in message


def test_empty_value_is_rejected():
    with pytest.raises(UsageError, match="needs a value"):
        parse_gpu_ids(["[]"])


def test_keyword_mixed_with_ids_is_rejected():
    with pytest.raises(UsageError, match="mixes a keyword"):
        parse_gpu_ids(["all", "0"])


def test_errors_are_one_line():
    for tokens in (["-1"], ["0", "0"], ["x"], [], ["all", "0"]):
        with pytest.raises(UsageError) as err:
            parse_gpu_ids(tokens)
        assert "\n" not in str(err.value)


# --- make_plan: GPUs ------------------------------------------------------------------------------------


def test_two_gpu_ids_give_two_nccl_workers_one_per_gpu():
    plan = make_plan(parse_gpu_ids(["0", "1"]), cuda_device_count=2)
    assert plan.devices == ("cuda:0", "cuda:1")
    assert plan.backend == "nccl"
    assert plan.cuda_visible_devices == "0,1"
    assert (plan.workers_per_host, plan.world_size, plan.is_cpu, plan.in_process) == (2, 2, False, False)


def test_one_gpu_runs_in_process_on_that_gpu():
    plan = make_plan(parse_gpu_ids(["1"]), cuda_device_count=2)
    assert plan.in_process
    assert plan.devices == ("cuda:1",)
    assert plan.cuda_visible_devices == "1"


def test_all_selects_every_visible_gpu():
    plan = make_plan(parse_gpu_ids(["all"]), cuda_device_count=3)
    assert plan.devices == ("cuda:0", "cuda:1", "cuda:2")
    assert plan.gpu_ids == (0, 1, 2)


def test_ids_index_into_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    plan = make_plan(parse_gpu_ids(["1"]), cuda_device_count=2)
    assert plan.cuda_visible_devices == "5"  # physical GPU for fresh processes
    assert plan.devices == ("cuda:1",)  # index as this process already sees it


def test_worker_processes_see_only_their_selected_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,7")
    plan = make_plan(parse_gpu_ids(["2", "0"]), cuda_device_count=3)
    assert plan.cuda_visible_devices == "7,3"
    assert plan.devices == ("cuda:0", "cuda:1")  # local rank i -> i-th selected GPU


def test_uuid_listed_in_cuda_visible_devices_resolves_to_its_index(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-a,MIG-b")
    plan = make_plan(parse_gpu_ids(["MIG-b"]), cuda_device_count=2)
    assert plan.devices == ("cuda:1",)
    assert plan.cuda_visible_devices == "MIG-b"


def test_uuids_pass_through_to_worker_processes():
    plan = make_plan(parse_gpu_ids(["MIG-a", "MIG-b"]), cuda_device_count=1)
    assert plan.cuda_visible_devices == "MIG-a,MIG-b"
    assert plan.devices == ("cuda:0", "cuda:1")


def test_single_unlisted_uuid_in_process_is_rejected_with_the_alternative():
    with pytest.raises(UsageError, match="CUDA_VISIBLE_DEVICES=MIG-a"):
        make_plan(parse_gpu_ids(["MIG-a"]), cuda_device_count=1)


def test_id_out_of_range_says_how_many_gpus_and_which_ids_are_valid():
    with pytest.raises(UsageError) as err:
        make_plan(parse_gpu_ids(["0", "2"]), cuda_device_count=2)
    message = str(err.value)
    assert "no GPU 2" in message and "2 GPU(s) visible" in message and "0..1" in message


def test_id_out_of_range_mentions_cuda_visible_devices_when_set(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4")
    with pytest.raises(UsageError, match=r"CUDA_VISIBLE_DEVICES=4.*only valid id is 0"):
        make_plan(parse_gpu_ids(["1"]), cuda_device_count=1)


@pytest.mark.parametrize("tokens", [["0"], ["all"]])
def test_gpus_on_a_machine_without_cuda_suggest_cpu(tokens):
    with pytest.raises(UsageError, match="--gpu-ids None"):
        make_plan(parse_gpu_ids(tokens), cuda_device_count=0)


def test_cpu_workers_with_gpu_ids_are_rejected():
    with pytest.raises(UsageError, match="only applies with --gpu-ids None"):
        make_plan(parse_gpu_ids(["0"]), cpu_workers=2, cuda_device_count=1)


# --- make_plan: default and CPU -------------------------------------------------------------------------


def test_default_uses_gpu_0_when_cuda_is_available():
    plan = make_plan(parse_gpu_ids(None), cuda_device_count=4)
    assert plan.devices == ("cuda:0",) and plan.notice is None


def test_default_falls_back_to_cpu_with_a_one_line_notice():
    plan = make_plan(parse_gpu_ids(None), cuda_device_count=0)
    assert plan.devices == ("cpu",) and plan.backend == "gloo" and plan.cuda_visible_devices is None
    assert plan.notice and "CPU" in plan.notice and "\n" not in plan.notice


@pytest.mark.skipif(torch.cuda.device_count() > 0, reason="this machine has a GPU")
def test_default_falls_back_to_cpu_on_this_machine():
    plan = make_plan(parse_gpu_ids(None))
    assert plan.is_cpu and plan.notice is not None


def test_default_with_cpu_workers_on_a_gpu_machine_is_rejected():
    with pytest.raises(UsageError, match="--cpu-workers 2 only applies with --gpu-ids None"):
        make_plan(parse_gpu_ids(None), cpu_workers=2, cuda_device_count=1)


def test_default_with_cpu_workers_on_a_cpu_machine_runs_that_many_cpu_workers():
    plan = make_plan(parse_gpu_ids(None), cpu_workers=2, cuda_device_count=0)
    assert plan.devices == ("cpu", "cpu")


def test_cpu_request_ignores_gpus():
    plan = make_plan(parse_gpu_ids(["None"]), cuda_device_count=8)
    assert plan.is_cpu and plan.devices == ("cpu",) and plan.notice is None


def test_cpu_workers_give_that_many_gloo_workers():
    plan = make_plan(parse_gpu_ids(["cpu"]), cpu_workers=3, cuda_device_count=0)
    assert plan.devices == ("cpu",) * 3 and plan.backend == "gloo" and plan.world_size == 3


def test_cpu_workers_use_one_torch_thread_each_unless_asked_for_more(monkeypatch):
    monkeypatch.setattr(devices, "usable_cores", lambda: 8)
    assert make_plan(parse_gpu_ids(["None"]), cpu_workers=3).threads_per_worker == 1
    assert make_plan(parse_gpu_ids(["None"]), cpu_workers=1).threads_per_worker == 1
    assert make_plan(parse_gpu_ids(["None"]), cpu_workers=2, threads=4).threads_per_worker == 4


def test_gpu_workers_split_the_cores_among_themselves(monkeypatch):
    monkeypatch.setattr(devices, "usable_cores", lambda: 16)
    assert make_plan(parse_gpu_ids(["0", "1"]), cuda_device_count=2).threads_per_worker == 8
    assert make_plan(parse_gpu_ids(["all"]), cuda_device_count=32).threads_per_worker == 1


@pytest.mark.parametrize("bad", [0, -1])
def test_threads_below_one_are_rejected(bad):
    with pytest.raises(UsageError, match="--threads must be"):
        make_plan(parse_gpu_ids(["None"]), threads=bad)


@pytest.mark.parametrize("bad", [0, -2])
def test_cpu_workers_below_one_are_rejected(bad):
    with pytest.raises(UsageError, match="--cpu-workers must be"):
        make_plan(parse_gpu_ids(["None"]), cpu_workers=bad)


def test_cpu_plan_never_initialises_cuda():
    """In a fresh process (this one may have used CUDA in other tests, on a GPU machine)."""
    import sys

    from helpers import run_cli

    code = """
import torch
from mjfleet.launch.devices import make_plan, parse_gpu_ids
from mjfleet.launch.launcher import run_workers
from mjfleet.fleet.context import WorkerContext, setup_worker

plan = make_plan(parse_gpu_ids(["None"]))

def work():
    ctx = WorkerContext.from_env(plan)
    setup_worker(ctx, plan)
    return torch.ones(2, device=ctx.device).sum().item()

print(run_workers(plan, work), torch.cuda.is_initialized())
"""
    result = run_cli(sys.executable, "-c", code, timeout=120, check=True)
    assert result.stdout.split() == ["2.0", "False"]


# --- hosts ----------------------------------------------------------------------------------------------


def test_hosts_default_to_localhost():
    assert make_plan(parse_gpu_ids(["None"]), hosts=None).hosts == ("localhost",)
    assert make_plan(parse_gpu_ids(["None"]), hosts=[]).hosts == ("localhost",)


def test_world_size_counts_workers_on_every_host():
    plan = make_plan(parse_gpu_ids(["None"]), cpu_workers=2, hosts=["h1", "h2", "h3"])
    assert (plan.hosts, plan.workers_per_host, plan.world_size) == (("h1", "h2", "h3"), 2, 6)
    assert not plan.in_process


def test_one_gpu_on_each_of_two_hosts_uses_worker_processes():
    plan = make_plan(parse_gpu_ids(["1"]), hosts=["h1", "h2"], cuda_device_count=2)
    assert plan.devices == ("cuda:0",) and plan.cuda_visible_devices == "1" and plan.world_size == 2


def test_one_worker_runs_in_this_process_only_when_its_host_is_this_machine():
    import socket

    for here in (None, ["localhost"], [socket.gethostname()]):
        assert make_plan(parse_gpu_ids(["None"]), hosts=here).in_process
    remote = make_plan(parse_gpu_ids(["None"]), hosts=["gpu-node-7"])
    assert remote.world_size == 1 and not remote.in_process  # launched there through torchrunx
    assert remote.describe().startswith("1 CPU worker (") and "gpu-node-7" in remote.describe()
    gpu = make_plan(parse_gpu_ids(["1"]), hosts=["gpu-node-7"], cuda_device_count=2)
    assert not gpu.in_process and gpu.devices == ("cuda:0",) and gpu.cuda_visible_devices == "1"


def test_duplicate_hosts_are_rejected():
    with pytest.raises(UsageError, match="h1 listed twice"):
        make_plan(parse_gpu_ids(["None"]), hosts=["h1", "h2", "h1"])


def test_slurm_hosts_outside_an_allocation_are_rejected(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("SLURM_JOBID", raising=False)
    with pytest.raises(UsageError, match="not inside a SLURM allocation"):
        make_plan(parse_gpu_ids(["None"]), hosts=["slurm"])


def test_slurm_cannot_be_mixed_with_host_names():
    with pytest.raises(UsageError, match="--hosts slurm"):
        make_plan(parse_gpu_ids(["None"]), hosts=["slurm", "h1"])


# --- describe -------------------------------------------------------------------------------------------


def test_describe_cpu_workers():
    plan = WorkerPlan(devices=("cpu", "cpu"), backend="gloo", threads_per_worker=1)
    assert plan.describe() == "2 CPU workers (gloo, 1 thread each) on localhost"
    two_hosts = WorkerPlan(devices=("cpu",), hosts=("a", "b"), backend="gloo", threads_per_worker=1)
    assert "(gloo, 1 thread each)" in two_hosts.describe()


def test_describe_single_cpu_worker():
    assert WorkerPlan(devices=("cpu",), threads_per_worker=4).describe() == "CPU, 1 worker (4 threads)"


def test_describe_single_gpu():
    plan = make_plan(parse_gpu_ids(["0"]), cuda_device_count=1)
    assert plan.describe() == "GPU 0 (cuda:0), 1 worker"


def test_describe_gpus_on_several_hosts():
    plan = make_plan(parse_gpu_ids(["0", "1"]), hosts=["a", "b"], cuda_device_count=2)
    assert plan.describe() == "GPUs 0, 1 on each host, 4 workers (nccl) on 2 hosts (a, b)"


def test_several_workers_share_each_gpu_over_gloo():
    one = make_plan(parse_gpu_ids(["0"]), workers_per_gpu=2, cuda_device_count=1)
    assert one.devices == ("cuda:0", "cuda:0") and one.backend == "gloo" and not one.in_process
    assert one.cuda_visible_devices == "0"
    assert one.describe() == "GPU 0, 2 workers (gloo, 2 per GPU) on localhost"
    two = make_plan(parse_gpu_ids(["0", "1"]), workers_per_gpu=2, cuda_device_count=2)
    assert two.devices == ("cuda:0", "cuda:0", "cuda:1", "cuda:1") and two.world_size == 4
    assert make_plan(parse_gpu_ids(["0", "1"]), cuda_device_count=2).backend == "nccl"


@pytest.mark.parametrize(
    ("request_", "per_gpu", "needle"), [(["None"], 2, "--cpu-workers"), (["0"], 0, ">= 1")]
)
def test_workers_per_gpu_on_cpu_or_below_one_is_a_usage_error(request_, per_gpu, needle):
    with pytest.raises(UsageError, match=needle):
        make_plan(parse_gpu_ids(request_), workers_per_gpu=per_gpu, cuda_device_count=1)


def test_a_task_default_of_cpu_workers_applies_on_cpu_capped_by_the_cores(monkeypatch):
    monkeypatch.setattr(devices, "usable_cores", lambda: 2)
    assert make_plan(parse_gpu_ids(["None"]), cpu_workers=None, default_cpu_workers=2).world_size == 2
    assert make_plan(parse_gpu_ids(None), None, default_cpu_workers=2, cuda_device_count=0).world_size == 2
    assert make_plan(parse_gpu_ids(["None"]), None, default_cpu_workers=4).world_size == 2  # one per core
    monkeypatch.setattr(devices, "usable_cores", lambda: 1)
    assert make_plan(parse_gpu_ids(["None"]), None, default_cpu_workers=2).world_size == 1
    # given, --cpu-workers wins over the task's default; on a GPU the default does not apply
    assert make_plan(parse_gpu_ids(["None"]), cpu_workers=1, default_cpu_workers=2).world_size == 1
    on_gpu = make_plan(parse_gpu_ids(None), None, default_cpu_workers=2, cuda_device_count=1)
    assert on_gpu.devices == ("cuda:0",)


def test_train_runs_the_flat_quadruped_on_two_cpu_workers_of_256_envs_by_default(monkeypatch):
    from mjfleet.cli.train import parse_args, resolve

    monkeypatch.setattr(devices, "usable_cores", lambda: 2)
    job = resolve(
        *parse_args(["Quadruped-Velocity-Flat", "--gpu-ids", "None", "--logs-root", "/nonexistent"])
    )
    assert job.plan.world_size == 2 and job.env.num_envs == 256
    job = resolve(*parse_args(["Quadruped-Velocity-Flat", "--gpu-ids", "None", "--cpu-workers", "1"]))
    assert job.plan.world_size == 1
    assert resolve(*parse_args(["Cartpole-Balance", "--gpu-ids", "None"])).plan.world_size == 1


def test_train_and_bench_take_the_flat_quadrupeds_cpu_networks_on_cpu_and_its_gpu_networks_on_gpus():
    from mjfleet.cli import bench, train
    from mjfleet.tasks import get_task

    spec = get_task("Quadruped-Velocity-Flat")
    cpu_dims = spec.default_agent_config("cpu").actor.hidden_dims
    gpu_dims = spec.default_agent_config("cuda:0").actor.hidden_dims
    assert cpu_dims != gpu_dims and spec.agent_config().actor.hidden_dims == gpu_dims
    for parse in (train.parse_args, bench.parse_args):
        _, on_cpu = parse(["Quadruped-Velocity-Flat", "--gpu-ids", "None"])
        assert on_cpu.agent.actor.hidden_dims == cpu_dims and on_cpu.agent.critic.hidden_dims == cpu_dims
        _, on_gpu = parse(["Quadruped-Velocity-Flat", "--gpu-ids", "0"])
        assert on_gpu.agent.actor.hidden_dims == gpu_dims and on_gpu.agent.critic.hidden_dims == gpu_dims
        # flags given win on either device, and the defaults of other settings are the same
        _, given = parse(
            ["Quadruped-Velocity-Flat", "--gpu-ids", "None", "--agent.actor.hidden-dims", "64", "32"]
        )
        assert given.agent.actor.hidden_dims == (64, 32) and given.agent.critic.hidden_dims == cpu_dims
        _, given = parse(["Quadruped-Velocity-Flat", "--gpu-ids", "1", "--agent.critic.hidden-dims", "64"])
        assert given.agent.critic.hidden_dims == (64,) and given.agent.actor.hidden_dims == gpu_dims
        assert on_cpu.agent.ppo == on_gpu.agent.ppo
    # the default device is this machine's: CPU without a GPU
    _, default = train.parse_args(["Quadruped-Velocity-Flat"])
    expected = gpu_dims if torch.cuda.device_count() else cpu_dims
    assert default.agent.actor.hidden_dims == expected
    # a task without CPU defaults has one set everywhere
    _, cartpole = train.parse_args(["Cartpole-Balance", "--gpu-ids", "None"])
    assert cartpole.agent == get_task("Cartpole-Balance").agent_config()
