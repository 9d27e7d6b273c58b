"""Launching: place a run's workers and run a function on them (in this process, or one torchrunx agent per host).

    devices.py    --gpu-ids / --cpu-workers -> the WorkerPlan (fleet/plan.py)
    hosts.py      --hosts: names, addresses, the interface that reaches them; slurm.py: inside an allocation
    launcher.py   run_workers: one worker here, or N through agents.py (the launcher's side of torchrunx's
                  protocol) and agent.py (on each host), each worker started by worker.py
    group.py, logserver.py, relay.py   the signed launcher-agent group, authenticated logs, signals passed on
    seam.py       the torchrunx names this package relies on; external.py: workers torchrun or srun started

Nothing here knows about tasks or RL; what runs inside a worker is in fleet/.
"""
