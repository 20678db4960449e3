"""Perception: a small CNN that estimates the task objects' poses from a camera frame.

The camera stays in the loop while the policy learns from a low-dimensional observation, which
trains on 2 CPU cores where end-to-end image policies do not. In the paper's Real2Sim2Real loop
(arXiv 2507.05198, section 3) the model is trained in the simulator, where the poses are known,
on raw renders or on VisAligner frames, and runs on the robot's camera.

- :class:`PoseEstimatorConfig` (configuration) and :class:`PoseEstimator` (modeling): the model,
  saved as ``config.json`` + ``model.safetensors``.
- :func:`generate_frames`, :func:`write_episode`, :func:`load_frames` (data): frames with
  ground-truth poses from expert episodes, resumable; :func:`randomized_look` for
  domain-randomised scene looks; :class:`PoseFramesConfig`: the settings of ``embodied-gym
  perception frames``. The same episodes as a trained VisAligner shows them (the aligned
  simulator's frames) are VisAligner's output: :mod:`embodied_gym.visaligner.pose_frames`
  (``generate_visaligner_frames``, and ``make_frames``, which makes any look of the config).
- :func:`train_pose_estimator` (train), :func:`pose_errors` (evaluate); ``visual_gap.measure_visual_gap``:
  the experiment that trains estimators on sim frames and measures them on a stand-in's camera.
- :func:`fit_estimator_offset` and :func:`corrected_estimator` (robot_offset): the estimator's constant
  bias on the robot's camera, measured on the robot's own demonstrations, and a corrected copy;
  :func:`fit_sim_offset` (sim_offset): its bias on the sim's own renders, measured against the sim's true
  poses, for the copy the sim-trained policies read in the sim.
- :mod:`.pose_entry`: the contract of ``obs["object_pose_estimate"]``, the policy's pose entry
  (its key, sources, update modes, the estimator's identity); the wrappers that add it are
  :class:`~embodied_gym.wrappers.pose.PoseEstimateWrapper` (the estimate, for a policy) and
  :class:`~embodied_gym.wrappers.pose.GroundTruthPoseWrapper` (the simulator's true poses, for
  recording sim demonstrations with exact labels; the policy still runs on the estimate).
"""

from embodied_gym.perception.configuration import PoseEstimatorConfig
from embodied_gym.perception.data import (
    Frames,
    PoseFramesConfig,
    estimator_config_of_frames,
    generate_frames,
    load_frames,
    per_frame,
    randomized_look,
    write_episode,
)
from embodied_gym.perception.evaluate import pose_errors
from embodied_gym.perception.modeling import PoseEstimator
from embodied_gym.perception.robot_offset import corrected_estimator, fit_estimator_offset
from embodied_gym.perception.sim_offset import fit_sim_offset
from embodied_gym.perception.training import PoseTrainConfig, train_pose_estimator

__all__ = [
    "Frames",
    "PoseEstimator",
    "PoseEstimatorConfig",
    "PoseFramesConfig",
    "PoseTrainConfig",
    "corrected_estimator",
    "estimator_config_of_frames",
    "fit_estimator_offset",
    "fit_sim_offset",
    "generate_frames",
    "load_frames",
    "per_frame",
    "pose_errors",
    "randomized_look",
    "train_pose_estimator",
    "write_episode",
]
