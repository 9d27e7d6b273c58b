"""mjfleet: PPO on MuJoCo-Warp, from one CPU core to every GPU of several machines."""

__version__ = "0.1.0"
