"""PhysAligner: calibrate the simulator's physics from recorded episodes (work in progress).

Implemented so far: the parameter space (:mod:`.space`), the simulated one-step dataset
(stage 1, :mod:`.transitions`) and the differentiable surrogate (stage 2, :mod:`.surrogate`).
Gradient refinement, the baselines and the ``calibrate`` command come next.
"""

from embodied_gym.physaligner.space import Parameter, ParameterSpace

__all__ = ["Parameter", "ParameterSpace"]
