"""Policies: LeRobot's ACT trained on our datasets, evaluation of any agent, TPO in the aligned sim.

Heavy imports (torch, lerobot) happen inside the modules, so ``import embodied_gym`` stays light.
"""
