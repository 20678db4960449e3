"""Training and evaluation frames for a pose estimator: camera frames with ground-truth object poses.

Frames come from scripted-expert episodes (:mod:`embodied_gym.envs.experts`), so the arms occlude
the objects and the cup gets lifted, as at test time; each episode's layout is drawn from its seed.
The ground truth is ``info["object_poses"]``: privileged state that the simulator knows and that the
stand-in robot reports for evaluation (as a motion-capture system would). It is used here as
*labels* only and never reaches a policy's observation.

Layout of a frame folder::

    <out>/frames.json              what the frames are (task, env id, camera, frame size, crop, input
                                   size, objects, transform): a later run must match it
    <out>/episode_<seed>.npz       one episode: ``inputs`` (T, h, w, 3) uint8 network inputs
                                   (cropped and resized), ``poses`` (T, n_objects, 7) ``[x, y, z,
                                   qw, qx, qy, qz]``, ``steps`` (T,: the control step, -1 for
                                   extra layouts at reset), ``seed``

Each episode file is written atomically (:func:`embodied_gym.atomic.atomic_path`) and skipped when
it exists, so an interrupted :func:`generate_frames` resumes where it stopped. Files are read with
``allow_pickle=False``.

Frames can be changed before they are stored (:func:`generate_frames`'s ``transform``: a callable
``(T, H, W, 3) uint8 -> (T, H, W, 3) uint8`` over one episode's full camera frames, such as a
VisAligner generation; :func:`per_frame` adapts an image -> image function), or frames made
elsewhere can be added with their poses (:func:`write_episode`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from embodied_gym.atomic import atomic_path, write_json
from embodied_gym.configs import setting
from embodied_gym.perception.configuration import PoseEstimatorConfig
from embodied_gym.sim.scene import SceneLook

MANIFEST = "frames.json"
FrameTransform = Callable[[np.ndarray], np.ndarray]


def _noise_texture(rng: np.random.Generator, size: int = 256) -> np.ndarray:
    """A random procedural texture: octaves of smoothed noise at random scales, contrast and tint."""
    import cv2

    img = np.zeros((size, size), np.float32)
    for scale in rng.choice([4, 8, 16, 32, 64, 128], size=int(rng.integers(1, 4)), replace=False):
        small = rng.random((int(scale), int(scale)), dtype=np.float32)
        img += cv2.resize(small, (size, size), interpolation=cv2.INTER_CUBIC) * rng.uniform(0.3, 1.0)
    img = (img - img.min()) / max(float(img.max() - img.min()), 1e-6)
    grey = 0.5 + rng.uniform(0.1, 0.9) * (img - 0.5)
    tint = rng.uniform(0.3, 1.0, 3).astype(np.float32)
    return np.clip(grey[..., None] * tint * 1.3 * 255, 0, 255).astype(np.uint8)


def randomized_look(seed: int) -> SceneLook:
    """A random scene look for domain randomisation (Tobin et al., 2017), drawn from ``seed``.

    Table: a plain colour or a procedural noise texture (never the stand-in's photographs); a
    backdrop texture or none; shadows on or off; light colour and ambient level; the fixed cameras
    moved by up to 1.5 cm and turned by up to 0.015 rad. Only the look changes: objects, arms and
    physics are the simulator's.
    """
    rng = np.random.default_rng([int(seed), 7351])
    plain = rng.random() < 0.3
    table_rgba = (*rng.uniform(0.2, 0.8, 3), 1.0)
    cams = {
        c: (tuple(rng.uniform(-0.015, 0.015, 3)), tuple(rng.uniform(-0.015, 0.015, 3)))
        for c in ("cam_high", "cam_front")
    }
    base = rng.uniform(0.55, 1.0)
    return SceneLook(
        shadows=bool(rng.random() < 0.5),
        offsamples=int(rng.choice([0, 4])),
        light_diffuse=tuple(np.clip(base * rng.uniform(0.8, 1.1, 3), 0, 1)),
        ambient=tuple(np.full(3, rng.uniform(0.2, 0.45)) * rng.uniform(0.9, 1.1, 3)),
        table_rgba=table_rgba,
        floor_rgba=(*rng.uniform(0.1, 0.5, 3), 1.0),
        table_texture=None if plain else _noise_texture(rng),
        backdrop_texture=_noise_texture(rng) if rng.random() < 0.6 else None,
        camera_offsets=cams,
    )


def per_frame(fn: Callable[[np.ndarray], np.ndarray]) -> FrameTransform:
    """An episode transform that applies the image -> image function ``fn`` to each frame."""

    def transform(frames: np.ndarray) -> np.ndarray:
        return np.stack([fn(f) for f in frames])

    transform.__name__ = getattr(fn, "__name__", "per_frame")
    return transform


def episode_path(out: Path, seed: int) -> Path:
    return out / f"episode_{int(seed):06d}.npz"


def check_manifest(out: Path, want: dict) -> None:
    path = out / MANIFEST
    if not path.exists():
        out.mkdir(parents=True, exist_ok=True)
        write_json(path, want)
        return
    have = json.loads(path.read_text())
    diff = {k: (have.get(k), v) for k, v in want.items() if have.get(k) != v}
    if diff:
        raise ValueError(
            f"{path} was written for other frames ({', '.join(f'{k}: {a!r} there, {b!r} now' for k, (a, b) in diff.items())}); "
            f"use another output folder or delete {out}"
        )


def write_episode(
    out: str | os.PathLike,
    config: PoseEstimatorConfig,
    seed: int,
    frames: Sequence[np.ndarray],
    poses: np.ndarray,
    steps: Sequence[int] | None = None,
    source: str = "external",
    cropped: bool = False,
) -> Path:
    """Store one episode of full camera ``frames`` (T of (H, W, 3) uint8) with their object ``poses``
    (T, len(config.objects), 7) in the frame folder ``out``; returns the episode file.

    For frames made outside :func:`generate_frames` (a VisAligner generation of a recorded sim
    episode, whose poses are the sim's); ``source`` is recorded in ``frames.json``. With
    ``cropped=True`` the frames are images of the crop region alone
    (:meth:`~embodied_gym.perception.configuration.PoseEstimatorConfig.preprocess_crop`), for a
    generator trained on the table region only.
    """
    out = Path(out)
    poses = np.asarray(poses, dtype=np.float64)
    if len(frames) != len(poses) or poses.ndim != 3 or poses.shape[1:] != (len(config.objects), 7):
        raise ValueError(
            f"write_episode needs one pose row (n_objects={len(config.objects)}, 7) per frame; "
            f"got {len(frames)} frames and poses of shape {poses.shape}"
        )
    check_manifest(out, {**config.input_fields(), "source": source})
    prep = config.preprocess_crop if cropped else config.preprocess
    inputs = np.stack([prep(f) for f in frames]) if len(frames) else np.zeros((0, *config.input_size, 3), np.uint8)
    step_array = np.arange(len(frames)) if steps is None else np.asarray(steps)
    path = episode_path(out, seed)
    with atomic_path(path) as tmp:
        np.savez(tmp, inputs=inputs, poses=poses, steps=step_array.astype(np.int64), seed=np.int64(seed))
    return path


def _poses_row(info: dict, objects) -> np.ndarray:
    poses = info.get("object_poses")
    if poses is None:
        raise ValueError(
            "the env's info has no 'object_poses': ground truth comes from the sim env or from a "
            "robot that reports it (the stand-in's task_status)"
        )
    return np.stack([np.asarray(poses[o], dtype=np.float64) for o in objects])


def _sim_frame(env: gym.Env, config: PoseEstimatorConfig) -> np.ndarray:
    """The sim env's frame of ``config.camera`` now, at ``config.frame_size``."""
    from embodied_gym.envs.aloha_env import AlohaTaskEnv

    u = env.unwrapped
    if not isinstance(u, AlohaTaskEnv):
        raise TypeError(f"rendering a camera needs a sim env (AlohaTaskEnv), got {type(u).__name__}")
    return u.render_camera(config.camera, config.frame_size)


def _frame_capture(env: gym.Env, config: PoseEstimatorConfig, real: bool) -> Callable[[dict], np.ndarray]:
    """``capture(obs)``: a robot's frame from its observation, a sim env's rendered now."""
    if real:
        return lambda obs: obs[config.camera]
    return lambda obs: _sim_frame(env, config)


def expert_episode(env, expert, seed: int, stride: int, capture: Callable, objects) -> tuple[list, list, list]:
    """Run ``expert`` for one episode from ``env.reset(seed=seed)`` until it ends; every ``stride``-th
    step (step 0 included) keep ``capture(obs)`` with the objects' true poses: (captures, poses, steps)."""
    obs, info = env.reset(seed=seed)
    expert.reset()
    captures, poses, steps = [], [], []
    t = 0
    while True:
        if t % stride == 0:
            captures.append(capture(obs))
            poses.append(_poses_row(info, objects))
            steps.append(t)
        obs, _, terminated, truncated, info = env.step(expert(obs, info))
        t += 1
        if terminated or truncated or info.get("physics_error"):
            return captures, poses, steps


def _frames_source(
    env_id: str, transform: FrameTransform | None, look: Callable[[int], SceneLook] | None, env_kwargs: dict | None
) -> str:
    """The manifest's ``source``: the env id, the transform, the look and the robot config."""
    source = f"{env_id}:{getattr(transform, '__name__', 'transform') if transform else 'raw'}"
    if look is not None:
        source += f"+look:{getattr(look, '__name__', 'look')}"
    robot_config = (env_kwargs or {}).get("robot_config")
    if robot_config is not None:  # another stand-in world: other frames
        source += f"+robot_config:{os.fspath(robot_config)}"
    return source


def _frame_env_kwargs(config: PoseEstimatorConfig, real: bool, env_kwargs: dict | None) -> dict[str, Any]:
    """``gym.make``'s kwargs for the frame episodes: the whole time limit, ``config``'s camera and size."""
    kwargs: dict[str, Any] = dict(terminate_on_success=False, image_size=config.frame_size, cameras=(config.camera,))
    # A sim env renders only the kept frames; a robot's frames come through its observation.
    kwargs["obs_type"] = "pixels_state" if real else "state"
    if real:
        kwargs["realtime"] = False
    kwargs.update(env_kwargs or {})
    return kwargs


@dataclass
class _FrameRun:
    """:func:`generate_frames` in this process: its settings, and the env (with its expert) the
    episodes run in, made once, or anew per episode when ``look`` gives each its own scene."""

    out: Path
    config: PoseEstimatorConfig
    env_id: str
    real: bool
    source: str  # the manifest's; names the transform in its errors
    frame_stride: int
    transform: FrameTransform | None
    look: Callable[[int], SceneLook] | None
    layouts_per_episode: int
    env_kwargs: dict[str, Any]  # gym.make's (_frame_env_kwargs)
    env: gym.Env | None = None
    expert: Any = None

    def env_for(self, seed: int) -> gym.Env:
        """The env to run episode ``seed`` in, checked to run ``config``'s task."""
        from embodied_gym.envs.base import aloha_env
        from embodied_gym.envs.experts import make_expert

        if self.env is None or self.look is not None:
            if self.env is not None:
                self.env.close()
            looks: dict[str, Any] = {"look": self.look(seed)} if self.look is not None else {}
            self.env = gym.make(self.env_id, **self.env_kwargs, **looks)
            task = aloha_env(self.env).task.name
            if task != self.config.task:
                raise ValueError(
                    f"env {self.env_id} runs task {task}, but the estimator config is for {self.config.task}"
                )
            self.expert = make_expert(self.env)
        return self.env

    def episode(self, seed: int) -> Path:
        """Episode ``seed``'s kept frames, then its extra layouts', transformed and written."""
        env, config = self.env_for(seed), self.config
        capture = _frame_capture(env, config, self.real)
        frames, poses, steps = expert_episode(env, self.expert, seed, self.frame_stride, capture, config.objects)
        video = _transformed(self.transform, np.stack(frames), self.source)
        extra = self.layouts(env, seed, poses, steps)
        if extra:
            video = np.concatenate([video, _transformed(self.transform, np.stack(extra), self.source)])
        return write_episode(self.out, config, seed, list(video), np.stack(poses), steps, source=self.source)

    def layouts(self, env: gym.Env, seed: int, poses: list, steps: list) -> list:
        """The frames of ``layouts_per_episode`` fresh layouts (a reset with a seed derived from
        ``seed``); their poses and step -1 are appended to ``poses`` and ``steps``."""
        extra = []
        for k in range(self.layouts_per_episode):
            layout_seed = int(np.random.default_rng([seed, k, 4242]).integers(2**31 - 1))
            obs, info = env.reset(seed=layout_seed)
            extra.append(obs[self.config.camera] if self.real else _sim_frame(env, self.config))
            poses.append(_poses_row(info, self.config.objects))
            steps.append(-1)
        return extra

    def close(self) -> None:
        if self.env is not None:
            self.env.close()


def _frames_in_process(run: _FrameRun, seeds: list, progress: bool) -> list[Path]:
    """:func:`generate_frames` for ``seeds``, one episode after another in this process."""
    from tqdm.auto import tqdm

    written: list[Path] = []
    try:
        for seed in tqdm(seeds, desc=f"frames {run.env_id}", disable=None if progress else True, unit="ep"):
            written.append(run.episode(int(seed)))
    finally:
        run.close()
    return written


def generate_frames(
    out: str | os.PathLike,
    config: PoseEstimatorConfig,
    seeds: Sequence[int],
    env_id: str | None = None,
    frame_stride: int = 4,
    transform: FrameTransform | None = None,
    env_kwargs: dict | None = None,
    look: Callable[[int], SceneLook] | None = None,
    layouts_per_episode: int = 0,
    progress: bool = True,
    workers: int = 1,
) -> list[Path]:
    """Run the scripted expert for one episode per seed and store every ``frame_stride``-th frame.

    Args:
        out: the frame folder (see the module docstring); existing episodes are kept (resume).
        config: decides the camera, the frame size, the crop and the objects.
        seeds: one episode per seed (the layout is drawn from it).
        env_id: a sim or ``-Real-`` id; default the task's sim id. Real ids run with ``realtime=False``.
        frame_stride: keep the frame of every this-many control steps (step 0 included).
        transform: applied to each episode's full frames before cropping (see the module docstring).
        env_kwargs: more ``gym.make`` keyword arguments (``physics=``, ``robot_config=`` ...).
        look: sim ids only: ``look(seed) -> SceneLook`` gives each episode its own scene look
            (domain randomisation, e.g. :func:`randomized_look`); the env is rebuilt per episode.
        layouts_per_episode: after each episode, this many more frames of fresh layouts (a reset
            with a seed derived from the episode's, arms at the start pose; stored with step -1):
            many layouts cost a reset each, not an episode. ``transform`` gets them as a second
            batch, separate from the episode's video.
        progress: show a tqdm bar.
        workers: processes that run the episodes (:class:`~embodied_gym.processes.WorkerPool`); an
            episode's frames depend only on its seed, so the files are those of one process. ``look``,
            ``transform`` and ``env_kwargs`` are sent to them (module-level functions, paths).

    Episodes run the whole time limit with ``terminate_on_success=False``, so frames after the
    grasp (the cup lifted and held) are included.
    """
    import embodied_gym

    if frame_stride < 1:
        raise ValueError(f"frame_stride must be >= 1, got {frame_stride}")
    if workers < 1:
        raise ValueError(f"workers must be at least 1 (1 runs the episodes in this process), got {workers}")
    out = Path(out)
    env_id = env_id or embodied_gym.env_id(config.task)
    real = embodied_gym.parse_env_id(env_id).real
    if look is not None and real:
        raise ValueError(f"look= changes a simulator's scene; {env_id} is a robot (use a sim id)")
    source = _frames_source(env_id, transform, look, env_kwargs)
    check_manifest(out, {**config.input_fields(), "source": source})
    todo = [s for s in seeds if not episode_path(out, s).exists()]
    written = [episode_path(out, s) for s in seeds if episode_path(out, s).exists()]
    if not todo:
        return written
    if min(workers, len(todo)) > 1:
        job = dict(
            env_id=env_id,
            frame_stride=frame_stride,
            transform=transform,
            env_kwargs=env_kwargs,
            look=look,
            layouts_per_episode=layouts_per_episode,
        )
        return written + _frames_in_workers(out, config, todo, job, min(workers, len(todo)), progress)
    kwargs = _frame_env_kwargs(config, real, env_kwargs)
    run = _FrameRun(out, config, env_id, real, source, frame_stride, transform, look, layouts_per_episode, kwargs)
    return written + _frames_in_process(run, todo, progress)


def _frames_in_workers(
    out: Path, config: PoseEstimatorConfig, seeds: list, job: dict, workers: int, progress: bool
) -> list[Path]:
    """:func:`generate_frames` (with ``job``'s keyword arguments) for ``seeds``, one seed per task across
    ``workers`` processes."""
    import pickle
    from concurrent.futures import as_completed

    from tqdm.auto import tqdm

    from embodied_gym.processes import WorkerPool

    for name in ("transform", "env_kwargs", "look"):
        try:
            pickle.dumps(job[name])
        except Exception as e:
            raise ValueError(
                f"generate_frames(workers > 1): {name}={job[name]!r} cannot be sent to a worker process "
                f"({type(e).__name__}: {e}); give a module-level function, or workers=1"
            ) from None
    written: dict[int, Path] = {}
    with (
        tqdm(
            total=len(seeds),
            desc=f"frames {job['env_id']} ({workers} workers)",
            disable=None if progress else True,
            unit="ep",
        ) as bar,
        WorkerPool(workers, what="frame generation worker") as pool,
    ):
        futures = {pool.submit(_frames_of_seed, out, config, int(seed), job): int(seed) for seed in seeds}
        for future in as_completed(futures):
            written[futures[future]] = pool.result(future)
            bar.update()
    return [written[int(s)] for s in seeds]


def _frames_of_seed(out: Path, config: PoseEstimatorConfig, seed: int, job: dict) -> Path:
    return generate_frames(out, config, [seed], progress=False, **job)[0]


def _transformed(transform: FrameTransform | None, frames: np.ndarray, source: str) -> np.ndarray:
    if transform is None:
        return frames
    changed = np.asarray(transform(frames))
    if changed.shape != frames.shape:
        raise ValueError(f"transform {source} returned frames of shape {changed.shape}, expected {frames.shape}")
    return changed.astype(np.uint8)


@dataclass
class Frames:
    """Frames loaded from one or more frame folders."""

    inputs: np.ndarray  # (N, h, w, 3) uint8 network inputs
    poses: np.ndarray  # (N, n_objects, 7)
    episode: np.ndarray  # (N,) index of the episode file each frame came from (for splits)

    def __len__(self) -> int:
        return len(self.inputs)


def load_frames(folders: str | os.PathLike | Sequence[str | os.PathLike], config: PoseEstimatorConfig) -> Frames:
    """All episodes of the frame folders, checked against ``config`` (same camera, crop, sizes, objects)."""
    if isinstance(folders, (str, os.PathLike)):
        folders = [folders]
    inputs, poses, episode = [], [], []
    n_ep = 0
    for folder in folders:
        folder = Path(folder)
        manifest = folder / MANIFEST
        if not manifest.exists():
            raise FileNotFoundError(
                f"{folder} is not a frame folder ({MANIFEST} is missing): make one with "
                f"embodied_gym.perception.generate_frames"
            )
        have = json.loads(manifest.read_text())
        want = config.input_fields()
        diff = [k for k, v in want.items() if have.get(k) != v]
        if diff:
            raise ValueError(
                f"{manifest} differs from the estimator config in {diff} "
                f"({[(have.get(k), want[k]) for k in diff]}); generate frames with this config"
            )
        for path in sorted(folder.glob("episode_*.npz")):
            with np.load(path, allow_pickle=False) as z:
                inputs.append(z["inputs"])
                poses.append(z["poses"])
            episode.append(np.full(len(inputs[-1]), n_ep))
            n_ep += 1
    if not inputs:
        raise ValueError(f"no episodes in {[str(f) for f in folders]}")
    return Frames(np.concatenate(inputs), np.concatenate(poses), np.concatenate(episode))


def estimator_config_of_frames(folder: str | os.PathLike) -> PoseEstimatorConfig:
    """The :class:`PoseEstimatorConfig` whose input the frames of ``folder`` are (task, camera, frame size,
    crop, input size, objects, from its ``frames.json``), the model's other settings at their defaults."""
    manifest = Path(folder) / MANIFEST
    if not manifest.exists():
        raise FileNotFoundError(
            f"{folder} is not a frame folder ({MANIFEST} is missing): make one with "
            f"`embodied-gym perception frames --out {folder}`"
        )
    have = json.loads(manifest.read_text())
    fields = PoseEstimatorConfig(task=have.get("task", PoseEstimatorConfig.task)).input_fields()
    return PoseEstimatorConfig(**{k: have[k] for k in fields if k in have})


@dataclass
class PoseFramesConfig:
    """Settings of :func:`~embodied_gym.visaligner.pose_frames.make_frames` (``embodied-gym perception frames``): a frame folder of
    scripted-expert episodes with their ground-truth poses, to train or measure a pose estimator on.

    ``look`` decides what the frames look like: ``raw`` (the sim's own renders), ``randomized``
    (each episode a randomised scene look, :func:`randomized_look`) or ``visaligner`` (the episodes
    as a trained VisAligner model shows them: the paper's aligned-simulator frames, for an estimator
    that runs on the real camera). The camera fields are those of the estimator to be trained.
    """

    out: str | None = setting(
        None, required=True, metavar="DIR", help="the frame folder (resumes: episodes already there are kept)"
    )
    task: str = setting(PoseEstimatorConfig.task, help="the task (its scripted expert and objects)")
    episodes: int = setting(60, help="expert episodes, one per seed")
    seed: int = setting(0, help="seed of the first episode (its layout is drawn from it; the others follow)")
    look: Literal["raw", "randomized", "visaligner"] = setting(
        "raw",
        help="raw: the sim's renders; randomized: a randomised scene look per episode; visaligner: the "
        "episodes as --visaligner-model shows them",
    )
    visaligner_model: str | None = setting(
        None, metavar="DIR", help="look visaligner: the VisAligner model folder (visaligner train's OUT/model)"
    )
    reference: str | None = setting(
        None,
        metavar="FILE",
        help="look visaligner: the real camera frame every episode starts from (an "
        "image, or the dataset recorded on the robot: its first frame)",
    )
    visaligner_steps: int | None = setting(None, help="look visaligner: denoising steps (default: the model's)")
    env: str | None = setting(
        None,
        metavar="ID",
        help="the env id the episodes run in (default: the task's sim id; a -Real- id "
        "films the stand-in's camera with its reported poses, to measure on)",
    )
    physics: str | None = setting(
        None, metavar="FILE", help="sim ids: a calibration result JSON (calibrate's output): the calibrated sim"
    )
    robot_config: str | None = setting(
        None, metavar="FILE", help="-Real- ids: the stand-in robot config (another world)"
    )
    frame_stride: int = setting(
        4, help="keep the frame of every this many control steps (look visaligner: the model's own stride is used)"
    )
    layouts_per_episode: int = setting(
        0, help="raw/randomized: after each episode this many reset frames of fresh cup layouts (cheap variety)"
    )
    camera: str = setting(PoseEstimatorConfig.camera, help="the camera the estimator reads")
    frame_size: tuple[int, int] = setting(
        PoseEstimatorConfig.frame_size, metavar=("H", "W"), help="the camera frame size (the env's image_size)"
    )
    crop: tuple[float, float, float, float] = setting(
        PoseEstimatorConfig.crop,
        metavar=("TOP", "LEFT", "BOTTOM", "RIGHT"),
        help="the table region, fractions of the frame",
    )
    input_size: tuple[int, int] = setting(
        PoseEstimatorConfig.input_size, metavar=("H", "W"), help="the size the crop is resized to (the network's input)"
    )
    workers: int = setting(1, help="raw/randomized: processes that run the episodes")
    device: str = setting("cpu", help="look visaligner: the torch device VisAligner runs on")
    progress: bool = setting(True, cli=False, help="show a tqdm bar")

    def estimator_config(self) -> PoseEstimatorConfig:
        return PoseEstimatorConfig(
            task=self.task, camera=self.camera, frame_size=self.frame_size, crop=self.crop, input_size=self.input_size
        )


__all__ = [
    "MANIFEST",
    "FrameTransform",
    "Frames",
    "PoseFramesConfig",
    "check_manifest",
    "episode_path",
    "estimator_config_of_frames",
    "expert_episode",
    "generate_frames",
    "load_frames",
    "per_frame",
    "randomized_look",
    "write_episode",
]
