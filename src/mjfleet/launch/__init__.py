"""Decide the worker plan and run a function on N workers (in this process, or via torchrunx).

`devices` parses --gpu-ids and builds the WorkerPlan, `launcher` runs a function on the plan's workers (`relay`
passes signals on to them), `worker` is what each worker uses to find its rank and device. Nothing here knows
about tasks or RL.
"""
