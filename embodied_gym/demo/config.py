"""The demo's settings: one typed dataclass per stage, filled from a profile YAML.

Profiles live in ``embodied_gym/demo/profiles/`` (``quick``, ``full``, ``smoke``). ``--config FILE``
overrides any field of the chosen profile; unknown stages or fields are errors naming them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from embodied_gym.physaligner.calibrate import CalibrationConfig

PROFILES = Path(__file__).with_name("profiles")


@dataclass
class RecordSettings:
    """Stage 1: scripted-expert demonstrations on the stand-in ("real") robot."""

    episodes: int = 50
    camera: str = "cam_high"
    image_size: tuple[int, int] = (64, 80)
    seed: int = 0


@dataclass
class CalibrateSettings(CalibrationConfig):
    """Stage 2: calibration of the sim's physics on the recorded demonstrations (any CalibrationConfig
    field; the method defaults to the recommended one), plus which parameters are free."""

    free: list[str] | None = None  # parameter names to calibrate (default: all)


@dataclass
class VisAlignerSettings:
    """Stage 3: VisAligner on the paired real/sim episodes (fields of visaligner.train.TrainConfig)."""

    preset: str = "tiny"
    vae_steps: int = 400
    steps: int = 1000
    batch_size: int = 4
    sample_every: int = 250
    sample_steps: int = 20  # denoising steps of the sample grids
    model: dict = field(default_factory=dict)  # VisAlignerConfig overrides


@dataclass
class GenerateSettings:
    """Stage 4: expert rollouts in the aligned sim (calibrated physics), frames through VisAligner."""

    episodes: int = 50
    seed: int = 10_000  # distinct from the recording's seeds
    num_inference_steps: int | None = None  # VisAligner denoising steps (default: the model's)
    frame_stride: int | None = None  # generate every k-th frame and hold it (default: the model's stride)
    batch_episodes: int = 8  # episodes generated together


@dataclass
class ACTSettings:
    """Stage 5: ACT (LeRobot) on one camera, for the aligned-sim data and the real-data baseline."""

    preset: str = "cpu"
    steps: int | None = None
    batch_size: int | None = None
    image_size: tuple[int, int] | None = None


@dataclass
class TPOSettings:
    """Stage 6: TPO fine-tuning in the aligned sim."""

    iterations: int = 2
    pairs: int = 25
    rollouts: int | None = None
    epochs: int = 80
    beta: float = 0.1
    visaligner_steps: int | None = None  # denoising steps per observed frame in the rollouts (default: the model's)
    sft_weight: float = 0.0  # > 0: also imitate the preferred rollouts (not in the paper; policies/tpo.py)


@dataclass
class EvalSettings:
    """Stage 7: every policy on the stand-in robot."""

    episodes: int = 50
    seed: int = 100_000
    # False: the scripted expert's bar shows its recorded demonstrations on the stand-in (the record
    # stage's episodes and seeds) instead of a separate evaluation run
    expert: bool = True


@dataclass
class DemoConfig:
    tasks: list[str] = field(default_factory=lambda: ["PickCup"])
    max_episode_steps: int | None = None  # every env's time limit (default: the task's own)
    torch_threads: int | None = None  # torch's CPU threads (default: torch's, one per core)
    record: RecordSettings = field(default_factory=RecordSettings)
    calibrate: CalibrateSettings = field(default_factory=CalibrateSettings)
    visaligner: VisAlignerSettings = field(default_factory=VisAlignerSettings)
    generate: GenerateSettings = field(default_factory=GenerateSettings)
    act: ACTSettings = field(default_factory=ACTSettings)
    tpo: TPOSettings = field(default_factory=TPOSettings)
    evaluate: EvalSettings = field(default_factory=EvalSettings)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _merge(obj, values: dict, where: str):
    if not isinstance(values, dict):
        raise ValueError(f"{where}: expected a mapping, got {type(values).__name__}")
    names = {f.name: f for f in dataclasses.fields(obj)}
    for key, value in values.items():
        if key not in names:
            raise ValueError(f"{where}: unknown setting {key!r}; valid: {sorted(names)}")
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            _merge(current, value, f"{where}.{key}")
        else:
            if isinstance(value, list) and isinstance(current, tuple):
                value = tuple(value)
            setattr(obj, key, value)
    return obj


def load_config(profile: str = "quick", override: str | None = None) -> DemoConfig:
    """The ``profile``'s settings, then ``override`` (a YAML file) on top."""
    from embodied_gym.envs.tasks import TASKS

    path = PROFILES / f"{profile}.yaml"
    if not path.exists():
        raise ValueError(f"unknown demo profile {profile!r}; valid: {sorted(p.stem for p in PROFILES.glob('*.yaml'))}")
    cfg = _merge(DemoConfig(), yaml.safe_load(path.read_text()) or {}, profile)
    if override:
        if not Path(override).exists():
            raise FileNotFoundError(f"--config {override}: no such file")
        cfg = _merge(cfg, yaml.safe_load(Path(override).read_text()) or {}, override)
    unknown = [t for t in cfg.tasks if t not in TASKS]
    if unknown:
        raise ValueError(f"unknown task(s) {unknown}; valid: {sorted(TASKS)}")
    return cfg
