"""LeRobot's ACT trained on embodied-gym datasets, split as LeRobot splits its policies.

- :mod:`.configuration`: :class:`ACTPreset`, :data:`PRESETS`, :class:`ACTTrainConfig` (also the
  ``train act`` command line and YAML).
- :mod:`.data`: the in-memory training frames and the (floored) normalisation statistics.
- :mod:`.modeling`: LeRobot's ``ACTPolicy`` and processors built for a dataset.
- :mod:`.checkpoints`: the checkpoint folder (a LeRobot ``pretrained_model`` plus training state).
- :mod:`.training`: :func:`train_act`, one readable loop.
"""

from embodied_gym.policies.act.checkpoints import (POLICY_META, latest_checkpoint, load_training_state,
                                                   resolve_pretrained_dir, save_checkpoint)
from embodied_gym.policies.act.configuration import PRESETS, ACTPreset, ACTTrainConfig, preset_field_names
from embodied_gym.policies.act.data import (STD_FLOOR, TrainingFrames, load_training_frames, normalisation_stats,
                                            resize_images, select_cameras)
from embodied_gym.policies.act.modeling import load_backbone_weights, make_act_policy
from embodied_gym.policies.act.training import TrainResult, make_optimizer, plot_training_log, train_act

__all__ = ["ACTPreset", "PRESETS", "ACTTrainConfig", "preset_field_names", "TrainingFrames", "STD_FLOOR",
           "normalisation_stats", "resize_images", "select_cameras", "load_training_frames", "make_act_policy",
           "load_backbone_weights", "POLICY_META", "save_checkpoint", "load_training_state", "latest_checkpoint",
           "resolve_pretrained_dir", "TrainResult", "train_act", "plot_training_log", "make_optimizer"]
