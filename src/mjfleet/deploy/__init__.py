"""Deployment: a trained policy outside mjfleet, and the policies that ship with it.

export.py        the actor as ONNX + TorchScript + policy.json, with the MJCF it was trained on
check.py         every export is run back against torch (ONNX, TorchScript, recurrent state) before it is kept
metadata.py      the facts a deployer needs beyond the network: the trained model, rules, mjlab's keys
play_export.py   `play --export`: a checkpoint's policy into <run_dir>/exported/
pretrained.py    the policies in src/mjfleet/pretrained/<Task>/ (`play --pretrained`)
"""
