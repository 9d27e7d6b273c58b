"""`sweep`: hyperparameter sweeps and seeds with Optuna, placed on CPU slots, GPUs, hosts or Slurm (docs/sweeps.md).

A trial is an ordinary `train` run and `play`'s evaluation of it, each a subprocess; Optuna's study (in the sweep
directory, or an RDB) is the queue of configurations and seeds and the record of how each trial ended.
"""
