"""Watching a policy live: MuJoCo's native window and the browser view (viser).

    native.py    `play --viewer native`: one world in mujoco.viewer's window, paced to real time
    browser.py   `play --viewer viser`: the first worlds in a web page, with commands, reward sums and checkpoints
    scene.py     what every browser view shares (the viser server on 127.0.0.1, the batched scene), and
                 `train --viewer viser`'s read-only view of rank 0's environments

play/live_viewer.py chooses between them for `play --viewer` and wires in the policy.
"""
