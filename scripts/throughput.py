"""Superseded by `uv run bench`; kept so old notes still work. Same flags as bench, the task defaults to Cartpole-Balance.

uv run python scripts/throughput.py                                  # = uv run bench Cartpole-Balance
uv run python scripts/throughput.py Cartpole-Swingup --num-envs 256 1024 --gpu-ids None
"""

from __future__ import annotations

import sys

from mjfleet.cli.bench import main

if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or args[0].startswith("-") and args[0] not in ("-h", "--help"):
        args = ["Cartpole-Balance", *args]
    main(args)
