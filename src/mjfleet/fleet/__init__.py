"""The worker runtime: what every worker of a run shares, whoever launched it.

    plan.py        WorkerPlan: the devices, hosts and backend of a run (launch/devices.py makes it)
    context.py     WorkerContext: this worker's rank and device, its seed, its process group (the one place that
                   reads RANK / LOCAL_RANK / WORLD_SIZE and joins the group)
    external.py    the variables torchrun or srun gave a worker they started (fleet/srun.py: from SLURM_*)
    reduce.py      reducers: every exchange between workers (all_reduce, or a shared-memory sum on one CPU host)
    agreement.py   the check that every rank holds the same parameters
    liveness.py    each worker's beats, and the rule that names the rank holding a run
    failure.py     a failed worker as a record, and the one line the user sees

Nothing here knows about tasks, algorithms or how workers were started (launch/, torchrun, srun).
"""
