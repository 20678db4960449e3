"""PhysAligner: calibrate the simulator's physics from recorded episodes (work in progress).

Implemented so far: the parameter space (:mod:`.space`), the simulated one-step dataset
(stage 1, :mod:`.transitions`), the differentiable surrogate (stage 2, :mod:`.surrogate`), and
gradient refinement through differentiable forward kinematics (stage 3, :mod:`.refine`,
:mod:`.fk`), the open-loop replay objective every method is judged by (:mod:`.objective`), and
the simulated-annealing and CMA-ES baselines (:mod:`.baselines`), and :func:`.calibrate.calibrate`
(the ``embodied-gym calibrate`` command) writing one result JSON per run. The mujoco.sysid
baseline, the Ray backend, the plotted report and the calibration benchmark come next.
"""

from embodied_gym.physaligner.space import Parameter, ParameterSpace

__all__ = ["Parameter", "ParameterSpace"]
