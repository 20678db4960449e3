"""LeRobot's ACT trained on embodied-gym datasets, split as LeRobot splits its policies.

- :mod:`.configuration`: :class:`ACTPreset`, :data:`PRESETS`, :class:`ACTTrainConfig` (also the
  ``train act`` command line and YAML).
- :mod:`.data`: the in-memory training frames and the (floored) normalisation statistics.
- :mod:`.modeling`: LeRobot's ``ACTPolicy`` and processors built for a dataset.
- :mod:`.checkpoints`: the checkpoint folder (a LeRobot ``pretrained_model`` plus training state).
- :mod:`.training`: :func:`train_act`, one readable loop.
"""

from embodied_gym.policies.act.checkpoints import (
    POLICY_META,
    latest_checkpoint,
    load_training_state,
    resolve_pretrained_dir,
    save_checkpoint,
)
from embodied_gym.policies.act.configuration import PRESETS, ACTPreset, ACTTrainConfig, preset_field_names
from embodied_gym.policies.act.data import (
    STD_FLOOR,
    TrainingFrames,
    load_training_frames,
    normalisation_stats,
    resize_images,
    select_cameras,
)
from embodied_gym.policies.act.modeling import load_backbone_weights, make_act_policy
from embodied_gym.policies.act.training import TrainResult, make_optimizer, plot_training_log, train_act

__all__ = [
    "POLICY_META",
    "PRESETS",
    "STD_FLOOR",
    "ACTPreset",
    "ACTTrainConfig",
    "TrainResult",
    "TrainingFrames",
    "latest_checkpoint",
    "load_backbone_weights",
    "load_training_frames",
    "load_training_state",
    "make_act_policy",
    "make_optimizer",
    "normalisation_stats",
    "plot_training_log",
    "preset_field_names",
    "resize_images",
    "resolve_pretrained_dir",
    "save_checkpoint",
    "select_cameras",
    "train_act",
]
