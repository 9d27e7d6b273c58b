"""`uv run bench`: physics, environment, rollout and training throughput of a task, side by side.

`measure` runs inside each worker (timing each phase with `phases`) and returns raw times and the physics trouble
met; `report` turns them into rates, ratios and a table (`table`), `plot` into a picture; `console` shows the
progress while it runs; `autotune` finds the environment count where throughput stops growing; `machine` says
what it all ran on.
"""
