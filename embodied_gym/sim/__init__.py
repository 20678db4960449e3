"""The simulator: the bimanual ALOHA robot, its physics, the task scenes and the one core that runs them.

- :mod:`.robot`: the 14-D joint layout, limits and start pose.
- :mod:`.physics`: :class:`~.physics.PhysicsParams`, every parameter calibration may touch.
- :mod:`.scene`: the ``MjSpec`` scene (arms, table, cameras, actuators, task objects).
- :mod:`.kinematics`: arm forward kinematics and IK.
- :mod:`.tasks`: one module per task and the registry.
- :mod:`.core`: :class:`~.core.SimCore`, which the sim env, the stand-in robot and calibration's
  one-step simulator share.

Nothing here imports the gymnasium envs or the robots: both build on it.
"""
