"""The demo's settings: one typed dataclass per stage, filled from a profile YAML.

The training stages nest the trainers' own configs (:class:`~embodied_gym.visaligner.train.TrainConfig`,
:class:`~embodied_gym.visaligner.generate.AlignedDemosConfig`, :class:`~embodied_gym.policies.act.ACTTrainConfig`,
:class:`~embodied_gym.policies.tpo.TPOConfig`, and calibration's
:class:`~embodied_gym.physaligner.calibrate.CalibrationConfig`), so a setting has the same name in a
profile as on that trainer's command line.

Profiles live in ``embodied_gym/demo/profiles/`` (``quick``, ``full``, ``smoke``). ``--config FILE``
overrides any field of the chosen profile; unknown stages or fields are errors naming them.
:meth:`DemoConfig.check` (run before any stage) refuses settings that cannot run here: a missing
ResNet weights file where the profile requires one (``full``), a cuda device without a GPU.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from embodied_gym.configs import merge, setting
from embodied_gym.data.features import AFTER_SUCCESS_STEPS
from embodied_gym.data.writer import DEFAULT_CRF
from embodied_gym.perception.train import PoseTrainConfig
from embodied_gym.physaligner.calibrate import CalibrationConfig
from embodied_gym.policies.act.configuration import ACTTrainConfig
from embodied_gym.policies.tpo import TPOConfig
from embodied_gym.visaligner.generate import AlignedDemosConfig
from embodied_gym.visaligner.train import TrainConfig

PROFILES = Path(__file__).with_name("profiles")


@dataclass
class RecordSettings:
    """Stage 1: scripted-expert demonstrations on the stand-in ("real") robot."""

    episodes: int = 50
    camera: str = "cam_high"
    image_size: tuple[int, int] = (64, 80)
    seed: int = 0
    after_success_steps: int = AFTER_SUCCESS_STEPS  # control steps recorded after the first success
    crf: int = DEFAULT_CRF  # video quality (lower keeps more; 0 lossless)
    workers: int | None = None  # processes that roll out the episodes (default: the CPU count)


@dataclass
class PerceptionSettings:
    """Stage 0 (``observation: pose_estimate``): the pose estimator every policy reads, trained in the
    sim on scripted-expert frames with domain-randomised scene looks (never the stand-in's)."""

    episodes: int = setting(60, help="sim episodes whose frames train the estimator (seeds 0..)")
    layouts_per_episode: int = setting(20, help="extra frames of fresh layouts after each episode")
    frame_stride: int = setting(4, help="keep every k-th frame of an episode")
    workers: int | None = setting(None, help="processes that render the frames (default: the CPU count)")
    robot_offset: bool = setting(
        True,
        help="correct the estimator's constant bias on the robot's camera, measured "
        "on the recorded demonstrations (stage perception_offset; PickCup)",
    )
    train: PoseTrainConfig = field(default_factory=PoseTrainConfig)


@dataclass
class CalibrateSettings(CalibrationConfig):
    """Stage 2: calibration of the sim's physics on the recorded demonstrations (any CalibrationConfig
    field; the method defaults to the recommended one), plus which parameters are free."""

    free: list[str] | None = None  # parameter names to calibrate (default: all)


def _stage(cls, **defaults):
    """A stage's settings: a trainer's own config (the same names as its command line), with the
    demo's defaults; the demo fills in its data paths (``dataset``, ``out``, ...)."""
    return field(default_factory=lambda: cls(**defaults))


@dataclass
class EvalSettings:
    """Stage 7: every policy on the stand-in robot."""

    episodes: int = 50
    seed: int = 100_000
    # False: the scripted expert's bar shows its recorded demonstrations on the stand-in (the record
    # stage's episodes and seeds) instead of a separate evaluation run
    expert: bool = True
    # When a policy reading estimated object poses gets a new estimate on the stand-in: every_frame, or
    # at_reset (the reset frame's estimate held for the episode, before any arm occludes the objects);
    # None: as each policy's data was recorded (every_frame here)
    pose_update: str | None = None
    workers: int | None = None  # processes that run a policy's episodes (default: the CPU count)


OBSERVATIONS = ("pose_estimate", "images")


@dataclass
class DemoConfig:
    tasks: list[str] = field(default_factory=lambda: ["PickCup"])
    # What the policies read besides the joint state. pose_estimate: the object poses a perception
    # model estimates from the camera frame (ACT's environment state; VisAligner is not needed and is
    # skipped); images: the camera frames themselves (end-to-end image ACT, VisAligner renders the
    # aligned sim's frames; a GPU path).
    observation: str = "pose_estimate"
    # With pose_estimate: the object poses the aligned-sim demos store. ground_truth: the simulator's
    # own (exact labels, no camera rendered; the better policy on PickCup, BENCHMARKS.md); estimate: the
    # estimator's, as the robot's demos have. Every policy is evaluated on the estimate either way.
    sim_pose_source: str = "ground_truth"
    # The robot the demo runs against: a stand-in config YAML (default: the shipped stand-in world).
    robot_config: str | None = None
    # The cameras' frame rate (None: a frame per 50 Hz control step); between frames the estimate is held.
    camera_fps: float | None = None
    max_episode_steps: int | None = None  # every env's time limit (default: the task's own)
    torch_threads: int | None = None  # torch's CPU threads (default: torch's, one per core)
    # True: ACT on the stand-in demos (act_real) trains in a second process while calibrate, generate and
    # act_aligned run (it reads only the recording), so a 2-core machine uses both cores; False: in turn.
    background_act_real: bool = True
    # True (the full profile): ACT's ResNet starts from a local pretrained weights file, as ACT trains
    # (ImageNet ResNet-18, Zhao et al., arXiv 2304.13705); without --act.backbone-weights FILE the demo stops
    require_backbone_weights: bool = False
    perception: PerceptionSettings = field(default_factory=PerceptionSettings)
    record: RecordSettings = field(default_factory=RecordSettings)
    calibrate: CalibrateSettings = field(default_factory=CalibrateSettings)
    # Stage 3: VisAligner on the paired real/sim episodes.
    visaligner: TrainConfig = _stage(TrainConfig)
    # Stage 4: expert rollouts in the aligned sim (calibrated physics), frames through VisAligner.
    generate: AlignedDemosConfig = _stage(AlignedDemosConfig, episodes=50)
    # Stage 5: ACT (LeRobot) on one camera, for the aligned-sim data and the real-data baseline.
    act: ACTTrainConfig = _stage(ACTTrainConfig)
    # Stage 6: TPO fine-tuning in the aligned sim.
    tpo: TPOConfig = _stage(TPOConfig, iterations=2)
    evaluate: EvalSettings = field(default_factory=EvalSettings)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def devices(self) -> dict[str, str | None]:
        """The torch device of each stage that has one, by its dotted setting name."""
        return {
            "act.device": self.act.device,
            "visaligner.device": self.visaligner.device,
            "generate.device": self.generate.device,
            "tpo.device": self.tpo.device,
        }

    def check(self) -> list[str]:
        """Refuse, before any stage runs, what would fail hours in; returns warnings.

        Raises:
            ValueError: ``require_backbone_weights`` and no ``act.backbone_weights``; a cuda device
                setting when torch sees no GPU.
            FileNotFoundError / ValueError: the backbone weights file is missing or does not fit
                ACT's ResNet.
        """
        import torch

        from embodied_gym.policies.act.configuration import PRESETS
        from embodied_gym.policies.act.modeling import BACKBONE_WEIGHTS_RECIPE, check_backbone_weights
        from embodied_gym.visaligner.presets import preset

        check_config(self)
        images = self.observation == "images" and self.act.images is not False
        if self.require_backbone_weights and images and not self.act.backbone_weights:
            raise ValueError(
                "this profile trains ACT's ResNet-18 from pretrained weights (act.backbone_weights), "
                "which are never downloaded: pass --act.backbone-weights FILE, a local torchvision "
                f"ResNet-18 state dict (.safetensors or .pth); {BACKBONE_WEIGHTS_RECIPE}. "
                "(--no-require-backbone-weights trains from a random init instead.)"
            )
        if self.act.backbone_weights and images:
            overrides = self.act.overrides or {}
            base = PRESETS[self.act.preset].vision_backbone if self.act.preset in PRESETS else "resnet18"
            check_backbone_weights(self.act.backbone_weights, overrides.get("vision_backbone", base))
        cuda = [k for k, v in self.devices().items() if v and str(v).startswith("cuda")]
        if cuda and not torch.cuda.is_available():
            raise ValueError(
                f"{', '.join(f'{k} = cuda' for k in cuda)}, but torch sees no GPU "
                f"(torch.cuda.is_available() is False); run on a GPU machine with a CUDA build of "
                f"torch, or pass {' '.join(f'--{k} cpu' for k in cuda)}"
            )
        warnings = []
        model = preset(self.visaligner.preset, **dict(self.visaligner.model))
        if self.visaligner.preset == "tiny" and tuple(model.image_size) != tuple(self.record.image_size):
            warnings.append(
                f"VisAligner's model works at {tuple(model.image_size)} but the record stage records "
                f"{tuple(self.record.image_size)}: frames are resized; set visaligner.model.image_size "
                f"to record.image_size to train at the recorded size"
            )
        return warnings


def load_config(profile: str = "quick", override: str | None = None) -> DemoConfig:
    """The ``profile``'s settings, then ``override`` (a YAML file) on top."""
    from embodied_gym.sim.tasks import TASKS

    path = PROFILES / f"{profile}.yaml"
    if not path.exists():
        raise ValueError(f"unknown demo profile {profile!r}; valid: {sorted(p.stem for p in PROFILES.glob('*.yaml'))}")
    cfg = merge(DemoConfig(), yaml.safe_load(path.read_text()) or {}, profile)
    if override:
        if not Path(override).exists():
            raise FileNotFoundError(f"--config {override}: no such file")
        cfg = merge(cfg, yaml.safe_load(Path(override).read_text()) or {}, override)
    check_config(cfg, TASKS)
    return cfg


def check_config(cfg: DemoConfig, tasks=None) -> None:
    """Raises ValueError naming the setting: an unknown task or observation, a missing robot config."""
    if tasks is None:
        from embodied_gym.sim.tasks import TASKS as tasks
    unknown = [t for t in cfg.tasks if t not in tasks]
    if unknown:
        raise ValueError(f"unknown task(s) {unknown}; valid: {sorted(tasks)}")
    if cfg.observation not in OBSERVATIONS:
        raise ValueError(f"observation: {cfg.observation!r} is not one of {list(OBSERVATIONS)}")
    from embodied_gym.perception.wrapper import POSE_SOURCES

    if cfg.sim_pose_source not in POSE_SOURCES:
        raise ValueError(f"sim_pose_source: {cfg.sim_pose_source!r} is not one of {list(POSE_SOURCES)}")
    from embodied_gym.perception.wrapper import POSE_UPDATES

    if cfg.evaluate.pose_update is not None and cfg.evaluate.pose_update not in POSE_UPDATES:
        raise ValueError(
            f"evaluate.pose_update: {cfg.evaluate.pose_update!r} is not one of {list(POSE_UPDATES)} "
            f"(or null: as each policy's data was recorded)"
        )
    if cfg.observation == "pose_estimate":
        from embodied_gym.perception.configuration import PoseEstimatorConfig

        for t in cfg.tasks:
            try:
                PoseEstimatorConfig(task=t)
            except (ValueError, KeyError) as e:
                raise ValueError(
                    f"observation: pose_estimate has no pose estimator for task {t} ({e}); use "
                    f"observation: images for it"
                ) from None
    if cfg.robot_config and not Path(cfg.robot_config).is_file():
        raise FileNotFoundError(
            f"robot_config {cfg.robot_config}: no such file (give a robot config YAML, such "
            f"as the ones in embodied_gym/robots/)"
        )
