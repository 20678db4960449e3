"""PhysAligner: calibrate the simulator's physics from recorded episodes.

The parameter space (:mod:`.space`: gains, damping, friction, armature, backlash, object
properties; the actuation delay is profiled over whole control steps), the one-step simulator and
its dense one-step rollouts (stage 1, :mod:`.transitions`), the differentiable surrogate
(stage 2, :mod:`.surrogate`), the trust-region loop that refines θ through the surrogate and
differentiable forward kinematics and checks every step in the real simulator (stage 3,
:mod:`.refine`, :mod:`.fk`), the open-loop replay objective every method is judged by (:mod:`.objective`), the
simulated-annealing, CMA-ES and mujoco.sysid baselines (:mod:`.baselines`), and
:func:`.calibrate.calibrate` (the ``embodied-gym calibrate`` command) writing one result JSON and a
report (:mod:`.report`) per run, guarded by held-out episodes.
"""

from embodied_gym.physaligner.space import Parameter, ParameterSpace

__all__ = ["Parameter", "ParameterSpace"]
