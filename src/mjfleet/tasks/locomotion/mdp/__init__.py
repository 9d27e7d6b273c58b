"""The terms of the velocity-tracking task, apart from the environment that wires them (as mjlab's `mdp/`):

    commands.py       velocity commands: drawing, redrawing, how well they are followed
    events.py         randomisation: start-up physics, pushes, reset state, terrain curriculum
    observations.py   observation terms, their noise, the height scan
    rewards.py        reward terms, and TERMS: each by the name of its weight in LocomotionRewards

Each function takes the environment (tasks/locomotion/env.py, or a subclass) as its first argument.
"""
