"""`uv run bench`: physics, environment, rollout and training throughput of a task, side by side.

`measure` runs inside each worker and returns raw times; `report` turns them into rates, ratios and a table;
`autotune` finds the environment count where throughput stops growing; `machine` says what it all ran on.
"""
