"""The terms of the velocity-tracking task, apart from the environment that wires them (as mjlab's `mdp/`):

    commands.py       velocity commands: drawing, redrawing, how well they are followed
    events.py         randomisation: start-up physics, pushes, reset state, terrain curriculum
    observations.py   observation terms, their noise, the height scan
    rewards.py        reward terms of the library (mjfleet.envs.terms), chosen by tasks/locomotion/recipes.py
    gait_rewards.py   mjlab 1.6's velocity terms: tracking with v_z and roll/pitch, upright, posture, the feet's
                      terms and self-collisions (reading tasks/locomotion/gait.py's sensors)

Each function takes the environment (tasks/locomotion/env.py, or a subclass) as its first argument.
"""
