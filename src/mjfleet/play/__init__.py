"""`play`'s work: evaluate one policy on a task, with its optional video, live viewer, baselines and export.

`cli/play.py` parses the flags and calls `play` (play/job.py), which wires the modules here:

    settings.py   the task's play settings, and notes where the env settings differ from training
    policy.py     what acts: a checkpoint (found and read) or a zero/random baseline
    video.py      the mp4 of one environment
    live_viewer.py the live viewer: MuJoCo's window or the browser (viser)
    report.py     the printed summary and the trained/zero/random table

Export and the shipped policies live in deploy/.
"""

from mjfleet.play.job import play

__all__ = ["play"]
