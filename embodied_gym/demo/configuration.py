"""The demo's settings: one typed dataclass per stage, filled from a profile YAML.

The training stages nest the trainers' own configs (:class:`~embodied_gym.visaligner.training.VisAlignerTrainConfig`,
:class:`~embodied_gym.recording.aligned.AlignedDemosConfig`, :class:`~embodied_gym.policies.act.ACTTrainConfig`,
:class:`~embodied_gym.policies.tpo.TPOConfig`, and calibration's
:class:`~embodied_gym.physaligner.calibrate.CalibrationConfig`), so a setting has the same name in a
profile as on that trainer's command line.

Each section is what one stage of :data:`embodied_gym.demo.stages.STAGES` receives. Profiles live in
``embodied_gym/demo/profiles/`` (``quick``, ``full``, ``benchmark``, ``smoke``, ``smoke_images``). ``--config FILE``
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
from embodied_gym.perception.configuration import PoseEstimatorConfig
from embodied_gym.perception.pose_entry import POSE_SOURCES, POSE_UPDATES
from embodied_gym.perception.training import PoseTrainConfig
from embodied_gym.physaligner.calibrate import CalibrationConfig
from embodied_gym.policies.act.configuration import PRESETS, ACTTrainConfig
from embodied_gym.policies.residual import ResidualRLConfig
from embodied_gym.policies.tpo import TPOConfig
from embodied_gym.recording.aligned import AlignedDemosConfig
from embodied_gym.sim.tasks import TASKS
from embodied_gym.visaligner.training import VisAlignerTrainConfig, model_config

PROFILES = Path(__file__).with_name("profiles")


@dataclass
class RecordStageConfig:
    """Stage ``record``: scripted-expert demonstrations on the stand-in robot, or (``demos``) the import of
    demonstrations recorded with LeRobot's own tools (:mod:`embodied_gym.recording.lerobot_import`)."""

    demos: str | None = setting(
        None,
        metavar="DATASET",
        help="start from this LeRobotDataset (recorded with lerobot-record, teleoperated) instead of recording "
        "the scripted expert: it is imported (one task; its episodes, camera and fps are its own)",
    )
    joint_map: dict[str, str] = setting(
        default_factory=dict,
        metavar="JOINT=MOTOR",
        help="with demos: our joint -> the dataset's motor name, for joints named differently",
    )
    camera_map: dict[str, str] = setting(
        default_factory=dict,
        metavar="CAMERA=DATASET_CAMERA",
        help="with demos: our camera (record.camera) -> the dataset's camera name, when they differ",
    )
    episodes: int = 50
    camera: str = "cam_high"
    image_size: tuple[int, int] = (64, 80)
    seed: int = 0
    after_success_steps: int = AFTER_SUCCESS_STEPS  # control steps recorded after the first success
    video: bool = setting(
        False,
        help="observation pose_estimate: also store the camera's video (what VisAligner learns from; "
        "perception.sources visaligner turns it on)",
    )
    crf: int = DEFAULT_CRF  # video quality (lower keeps more; 0 lossless)
    workers: int | None = setting(
        None, help="processes that roll out the episodes (default: the CPU count)", cache_key=False
    )


@dataclass
class PerceptionStageConfig:
    """Stage ``perception`` (``observation: pose_estimate``): the pose estimator every policy reads,
    trained in the sim on scripted-expert frames with domain-randomised scene looks (never the stand-in's)."""

    model: str | None = setting(
        None,
        metavar="FOLDER",
        help="a trained pose estimator's folder (embodied-gym perception train) to use instead of training one",
    )
    episodes: int = setting(60, help="sim episodes whose frames train the estimator (seeds 0..)")
    layouts_per_episode: int = setting(20, help="extra frames of fresh layouts after each episode")
    frame_stride: int = setting(4, help="keep every k-th frame of an episode")
    workers: int | None = setting(
        None, help="processes that render the frames (default: the CPU count)", cache_key=False
    )
    sources: list[str] = setting(
        default_factory=lambda: ["randomized"],
        help="what the estimator the sim-trained policies read on the robot learns from: randomized (this "
        "stage's sim frames in domain-randomised looks) and / or visaligner (calibrated-sim episodes as "
        "VisAligner, fine-tuned on the robot's recorded video, shows them: adds the stages visaligner and "
        "perception_aligned, and the record stage stores the camera's video)",
    )
    visaligner_episodes: int = setting(
        40, help="sources visaligner: calibrated-sim episodes rendered through VisAligner"
    )
    visaligner_steps: int | None = setting(
        4, help="sources visaligner: VisAligner's denoising steps (default the model's)"
    )
    robot_offset: bool = setting(
        True,
        help="correct the estimator's constant bias on the robot's camera, measured on the recorded "
        "demonstrations where the gripper closes on (and releases) each task's objects (stage perception_offset)",
        cache_key=False,  # the perception_offset stage's setting, not the estimator's
    )
    sim_offset: bool = setting(
        True,
        help="correct the estimator's constant bias on the sim's own renders, measured against the sim's true "
        "poses (stage perception_sim_offset): the sim-trained policies then read an estimate without a constant "
        "bias in the sim (TPO's rollouts and selection, the residual, in-sim evaluation) as on the robot",
        cache_key=False,  # the perception_sim_offset stage's setting, not the estimator's
    )
    train: PoseTrainConfig = field(default_factory=PoseTrainConfig)


@dataclass
class CalibrateStageConfig(CalibrationConfig):
    """Stage ``calibrate``: calibration of the sim's physics on the recorded demonstrations (any CalibrationConfig
    field; the method defaults to the recommended one), plus which parameters are free."""

    free: list[str] | None = None  # parameter names to calibrate (default: all)


def _stage(cls, **defaults):
    """A stage's settings: a trainer's own config (the same names as its command line), with the
    demo's defaults; the demo fills in its data paths (``dataset``, ``out``, ...)."""
    return field(default_factory=lambda: cls(**defaults))


@dataclass
class EvaluateStageConfig:
    """Stage ``evaluate``: every policy on the stand-in robot, on the same seeds."""

    episodes: int = 50
    seed: int = 100_000
    # False: the scripted expert's bar shows its recorded demonstrations on the stand-in (the record
    # stage's episodes and seeds) instead of a separate evaluation run
    expert: bool = True
    # When a policy reading estimated object poses gets a new estimate on the stand-in: every_frame, or
    # at_reset (the reset frame's estimate held for the episode); None: as each policy's data was
    # recorded (the loop's pose_update)
    pose_update: str | None = None
    workers: int | None = setting(
        None, help="processes that run a policy's episodes (default: the CPU count)", cache_key=False
    )
    policies: list[str] = setting(
        default_factory=lambda: ["expert", "act_stand_in", "act_aligned", "tpo"],
        help="what is evaluated on the stand-in: expert and the stages that train a policy "
        "(act_stand_in, act_aligned, act_nominal, tpo, residual)",
    )
    comparisons: list[list[str]] = setting(
        default_factory=lambda: [["act_aligned", "act_stand_in"], ["tpo", "act_aligned"]],
        help="pairs of evaluated policies tested on the same seeds (exact McNemar)",
    )
    in_sim: list[str] = setting(
        default_factory=list,
        help="policies also evaluated in the calibrated sim they were trained in (entries NAME_in_sim)",
    )
    in_nominal_sim: list[str] = setting(
        default_factory=list,
        help="policies also evaluated in the uncalibrated (nominal) sim (entries NAME_in_nominal_sim): with "
        "in_sim, whether a sim ranks the policies as the robot does (embodied-gym sim2real)",
    )
    ablation_estimator: str | None = setting(
        None,
        metavar="FOLDER",
        help="another pose estimator (e.g. trained on raw sim renders) the aligned-sim policy is also "
        "evaluated with on the stand-in (entry act_aligned_ablation_estimator)",
    )


OBSERVATIONS = ("pose_estimate", "images")
#: what the robot's pose estimator can learn from (``perception.sources``)
PERCEPTION_SOURCES = ("randomized", "visaligner")
#: the stages that train a policy the evaluate stage can name (act_nominal only with nominal_sim)
POLICY_STAGES = ("act_stand_in", "act_aligned", "act_nominal", "tpo", "residual")


@dataclass
class DemoConfig:
    tasks: list[str] = setting(
        default_factory=lambda: ["PickCup"], help="the tasks the loop runs, one after another, or all (every task)"
    )
    # What the policies read besides the joint state. pose_estimate: the object poses a perception
    # model estimates from the camera frame (ACT's environment state; VisAligner is not needed and is
    # skipped); images: the camera frames themselves (end-to-end image ACT, VisAligner renders the
    # aligned sim's frames; a GPU path).
    observation: str = "pose_estimate"
    # With pose_estimate: the object poses the aligned-sim demos store. ground_truth: the simulator's
    # own (exact labels, no camera rendered); estimate: the
    # estimator's, as the robot's demos have. Every policy is evaluated on the estimate either way.
    sim_pose_source: str = "ground_truth"
    # With pose_estimate: when the pose entry of every recording is refreshed (stand-in and sim demos,
    # TPO's rollouts, and evaluation unless evaluate.pose_update says otherwise), so the policies learn
    # from the observation they are evaluated on. every_frame: at each camera frame (a carried object's
    # pose follows it); at_reset: the reset frame's poses held for the episode (before any arm occludes
    # the objects; the policy then tracks progress from the joint state).
    pose_update: str = "every_frame"
    # The robot the demo runs against: a stand-in config YAML (default: the shipped stand-in world).
    robot_config: str | None = None
    # The cameras' frame rate (None: a frame per 50 Hz control step); between frames the estimate is held.
    camera_fps: float | None = None
    max_episode_steps: int | None = None  # every env's time limit (default: the task's own)
    torch_threads: int | None = None  # torch's CPU threads (default: torch's, one per core)
    # True: ACT on the stand-in demos (act_stand_in) trains in a second process while calibrate, generate
    # and act_aligned run (it reads only the recording), so a 2-core machine uses both cores; False: in turn.
    background_act_stand_in: bool = True
    # True: also generate demonstrations in the uncalibrated (nominal) sim and train ACT on them
    # (generate_nominal, act_nominal): what calibration is measured against (the policy benchmark's row b).
    nominal_sim: bool = False
    # True (the full profile): ACT's ResNet starts from a local pretrained weights file, as ACT trains
    # (ImageNet ResNet-18, Zhao et al., arXiv 2304.13705); without --act.backbone-weights FILE the demo stops
    require_backbone_weights: bool = False
    perception: PerceptionStageConfig = field(default_factory=PerceptionStageConfig)
    record: RecordStageConfig = field(default_factory=RecordStageConfig)
    calibrate: CalibrateStageConfig = field(default_factory=CalibrateStageConfig)
    # Stage visaligner: VisAligner on the paired stand-in/sim episodes.
    visaligner: VisAlignerTrainConfig = _stage(VisAlignerTrainConfig)
    # Stages generate (and generate_nominal): expert rollouts in the sim, frames through VisAligner.
    generate: AlignedDemosConfig = _stage(AlignedDemosConfig, episodes=50)
    # Stages act_stand_in, act_aligned (and act_nominal): ACT (LeRobot) on each dataset.
    act: ACTTrainConfig = _stage(ACTTrainConfig)
    # Stage tpo: TPO fine-tuning in the aligned sim.
    tpo: TPOConfig = _stage(TPOConfig, iterations=2)
    # Stage residual: the library RL baseline, SB3 residual RL over the frozen aligned-sim ACT.
    residual: ResidualRLConfig = _stage(ResidualRLConfig)
    evaluate: EvaluateStageConfig = field(default_factory=EvaluateStageConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def aligned_perception(self) -> bool:
        """The pose path with an estimator trained on VisAligner frames (``perception.sources`` visaligner)."""
        return self.observation == "pose_estimate" and "visaligner" in self.perception.sources

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

        from embodied_gym.policies.act.modeling import BACKBONE_WEIGHTS_RECIPE, check_backbone_weights

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
        model = model_config(self.visaligner)
        images_path = self.observation == "images"
        if (
            images_path
            and self.visaligner.preset == "tiny"
            and tuple(model.image_size) != tuple(self.record.image_size)
        ):
            warnings.append(
                f"VisAligner's model works at {tuple(model.image_size)} but the record stage records "
                f"{tuple(self.record.image_size)}: frames are resized; set visaligner.model.image_size "
                f"to record.image_size to train at the recorded size"
            )
        return warnings


def load_config(profile: str = "quick", override: str | None = None) -> DemoConfig:
    """The ``profile``'s settings, then ``override`` (a YAML file) on top."""
    path = PROFILES / f"{profile}.yaml"
    if not path.exists():
        raise ValueError(f"unknown demo profile {profile!r}; valid: {sorted(p.stem for p in PROFILES.glob('*.yaml'))}")
    cfg = merge(DemoConfig(), yaml.safe_load(path.read_text()) or {}, profile)
    if override:
        if not Path(override).exists():
            raise FileNotFoundError(f"--config {override}: no such file")
        cfg = merge(cfg, yaml.safe_load(Path(override).read_text()) or {}, override)
    check_config(cfg)
    return cfg


def check_config(cfg: DemoConfig) -> None:
    """Raises ValueError naming the setting: an unknown task or observation, a missing robot config,
    an evaluation of a policy the loop does not train. ``tasks: [all]`` becomes every registered task."""
    if list(cfg.tasks) == ["all"]:
        cfg.tasks = list(TASKS)
    unknown = [t for t in cfg.tasks if t not in TASKS]
    if unknown:
        raise ValueError(f"unknown task(s) {unknown}; valid: {sorted(TASKS)} or all")
    if cfg.observation not in OBSERVATIONS:
        raise ValueError(f"observation: {cfg.observation!r} is not one of {list(OBSERVATIONS)}")
    bad = [s for s in cfg.perception.sources if s not in PERCEPTION_SOURCES]
    if bad or not cfg.perception.sources:
        raise ValueError(
            f"perception.sources: {list(cfg.perception.sources)} must name one or more of {list(PERCEPTION_SOURCES)}"
        )

    if cfg.sim_pose_source not in POSE_SOURCES:
        raise ValueError(f"sim_pose_source: {cfg.sim_pose_source!r} is not one of {list(POSE_SOURCES)}")

    if cfg.pose_update not in POSE_UPDATES:
        raise ValueError(f"pose_update: {cfg.pose_update!r} is not one of {list(POSE_UPDATES)}")
    if cfg.evaluate.pose_update is not None and cfg.evaluate.pose_update not in POSE_UPDATES:
        raise ValueError(
            f"evaluate.pose_update: {cfg.evaluate.pose_update!r} is not one of {list(POSE_UPDATES)} "
            f"(or null: as each policy's data was recorded)"
        )
    if cfg.observation == "pose_estimate":
        for t in cfg.tasks:
            try:
                PoseEstimatorConfig(task=t)
            except (ValueError, KeyError) as e:
                raise ValueError(
                    f"observation: pose_estimate has no pose estimator for task {t} ({e}); use "
                    f"observation: images for it"
                ) from None
    if cfg.robot_config:
        from embodied_gym.robots import check_robot_config

        try:  # the whole file now, not when the record stage first connects to the robot
            check_robot_config(cfg.robot_config)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"robot_config {cfg.robot_config}: no such file (give a stand-in config YAML, such "
                f"as the ones in embodied_gym/robots/)"
            ) from None
        except ValueError as e:
            raise ValueError(f"robot_config: {e}") from None
    if cfg.record.demos:
        _check_demos(cfg)
    _check_evaluate(cfg)


def _check_demos(cfg: DemoConfig) -> None:
    """``record.demos``: one task, and a dataset whose joints and camera the import can find."""
    from embodied_gym.recording.lerobot_import import check_import

    if len(cfg.tasks) != 1:
        raise ValueError(
            f"record.demos ({cfg.record.demos}) holds one task's demonstrations; pass that task alone "
            f"(--tasks T), not {cfg.tasks}"
        )
    # the pose estimator reads the robot's frames at its training size (the given model's is checked at import)
    frame_size = PoseEstimatorConfig(task=cfg.tasks[0]).frame_size if cfg.observation == "pose_estimate" else None
    check_import(
        str(cfg.record.demos),
        cfg.record.joint_map,
        cfg.record.camera,
        cfg.record.camera_map,
        need_frames=True,
        frame_size=None if cfg.perception.model else frame_size,
    )


def _check_evaluate(cfg: DemoConfig) -> None:
    """The evaluate section names only policies the loop trains, and compares only what it evaluates."""
    e = cfg.evaluate
    trained = [p for p in POLICY_STAGES if cfg.nominal_sim or p != "act_nominal"]
    unknown = [p for p in e.policies if p != "expert" and p not in trained]
    if unknown:
        extra = " (act_nominal needs nominal_sim: true)" if "act_nominal" in unknown else ""
        raise ValueError(
            f"evaluate.policies: {unknown} are not trained by the loop; valid: {['expert', *trained]}{extra}"
        )
    if "residual" in e.policies and cfg.observation != "pose_estimate":
        raise ValueError(
            "evaluate.policies: residual reads the pose estimate (observation: pose_estimate); drop it with "
            f"observation: {cfg.observation}"
        )
    for key in ("in_sim", "in_nominal_sim"):
        not_evaluated = [p for p in getattr(e, key) if p not in e.policies or p == "expert"]
        if not_evaluated:
            raise ValueError(f"evaluate.{key}: {not_evaluated} must be trained policies listed in evaluate.policies")
    # every entry the evaluate stage can write; a pair it did not evaluate this run is left out
    names = [
        "expert",
        *trained,
        *(f"{p}_in_sim" for p in e.in_sim),
        *(f"{p}_in_nominal_sim" for p in e.in_nominal_sim),
        "act_aligned_ablation_estimator",
    ]
    if e.ablation_estimator and ("act_aligned" not in e.policies or cfg.observation != "pose_estimate"):
        raise ValueError("evaluate.ablation_estimator needs observation: pose_estimate and act_aligned evaluated")
    for pair in e.comparisons:
        if len(pair) != 2 or any(p not in names for p in pair):
            raise ValueError(f"evaluate.comparisons: {pair} must be two entries of {names}")
