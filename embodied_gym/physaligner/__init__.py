"""PhysAligner: calibrate the simulator's physics from recorded episodes (work in progress).

Implemented so far: the parameter space (:mod:`.space`), the simulated one-step dataset
(stage 1, :mod:`.transitions`), the differentiable surrogate (stage 2, :mod:`.surrogate`), and
gradient refinement through differentiable forward kinematics (stage 3, :mod:`.refine`,
:mod:`.fk`). The baselines (SA, CMA-ES, mujoco.sysid), the ``calibrate`` command, its report
and the calibration benchmark come next.
"""

from embodied_gym.physaligner.space import Parameter, ParameterSpace

__all__ = ["Parameter", "ParameterSpace"]
