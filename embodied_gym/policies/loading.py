"""Load any policy we can run as an agent ``action = agent(obs, info)``.

- ``"expert"``: the task's scripted expert (:func:`embodied_gym.make_expert`).
- an ACT folder (``embodied-gym train act --out``, a checkpoint, or a ``pretrained_model`` folder):
  :class:`ACTAgent`, LeRobot's ``ACTPolicy`` with its processors.
- a ``.zip`` saved by stable-baselines3 (PPO, SAC, A2C, TD3, DDPG): :class:`SB3Agent`.

Loading never runs code from the file (the trust model, docs/policies.md): an SB3 zip is read without
unpickling (:func:`inspect_sb3_zip`) and an ACT folder's config and processor files are checked
against allow-lists before LeRobot reads them (:func:`check_act_folder`); ``trust_policy_file=True``
(``eval --trust-policy-file``) hands the file to the library's own loader instead.

Every agent has ``reset()`` (call it at each episode start) and ``requirements``: the env kwargs it
needs (``obs_type``, ``cameras``, ``image_size``, ``control_mode``), which :func:`make_env_for`
applies, so the same agent runs on a sim id, a VisAligner-wrapped sim id and a Real id. They are the
settings the policy was trained with (an ACT folder's ``embodied_gym_policy.json``, an SB3 zip's
``<name>.env.json`` sidecar or its stored spaces); ``load_agent``'s ``cameras``, ``image_size`` and
``control_mode`` override them.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from embodied_gym.data import features as F
from embodied_gym.policies.act import POLICY_META, resize_images, resolve_pretrained_dir


@dataclass
class EnvRequirements:
    """What an agent needs from the env it acts in."""

    obs_type: str = "state"
    cameras: tuple[str, ...] = ()
    image_size: tuple[int, int] | None = None  # None: the env's default
    control_mode: str = "joint_pos"
    #: pose estimator folder whose estimate the policy reads (``obs["object_pose_estimate"]``);
    #: not a gym kwarg: :func:`make_env_for` wraps the env with it
    pose_estimator: str | None = None
    #: the camera rate the policy's training data was recorded at (None: a frame per control step)
    camera_fps: float | None = None

    def env_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"obs_type": self.obs_type, "control_mode": self.control_mode}
        if self.camera_fps is not None and self.obs_type != "state":
            kw["camera_fps"] = self.camera_fps
        if self.cameras:
            kw["cameras"] = tuple(self.cameras)
        if self.image_size:
            kw["image_size"] = tuple(self.image_size)
        return kw


class ExpertAgent:
    """The task's scripted expert; it reads privileged ``info`` (object poses)."""

    name = "expert"

    def __init__(self, control_mode: str = "joint_pos"):
        self.requirements = EnvRequirements(obs_type="state", control_mode=control_mode)
        self._expert = None
        self._env = None

    def bind(self, env) -> None:
        import embodied_gym

        self._env = env
        self._expert = embodied_gym.make_expert(env)

    def reset(self) -> None:
        if self._env is not None:
            self.bind(self._env)

    def __call__(self, obs, info) -> np.ndarray:
        if self._expert is None:
            raise RuntimeError("ExpertAgent.bind(env) must be called before acting (make_env_for does it)")
        return self._expert(obs, info)


class ACTAgent:
    """LeRobot ``ACTPolicy`` as an agent: env observation -> 14 absolute joint targets (``joint_pos``).

    Images are resized to the size the policy was trained at with the training code's own resize.
    ``temporal_ensemble_coeff`` switches on ACT's temporal ensembling (a new chunk every step,
    exponentially weighted); otherwise the policy runs ``n_action_steps`` actions of each chunk.
    A policy with the ``observation.environment_state`` input reads ``obs["object_pose_estimate"]``
    (a :class:`~embodied_gym.perception.PoseEstimateWrapper`'s estimate from the camera, never the
    simulator's state); its requirements name the estimator its training data was recorded with,
    from the policy's ``embodied_gym_policy.json``.
    """

    name = "act"

    def __init__(
        self,
        path: str | os.PathLike,
        device: str = "cpu",
        temporal_ensemble_coeff: float | None = None,
        *,
        trust_policy_file: bool = False,
    ):
        self.path = resolve_pretrained_dir(path)
        check_act_folder(self.path, trust_policy_file=trust_policy_file)  # before LeRobot reads any of it

        from lerobot.policies import make_pre_post_processors
        from lerobot.policies.act.modeling_act import ACTPolicy, ACTTemporalEnsembler

        meta_path = self.path / POLICY_META
        if meta_path.exists():
            self.meta = json.loads(meta_path.read_text())
            if not isinstance(self.meta, dict):
                raise ValueError(f"{meta_path}: expected a JSON object")
        else:  # a LeRobot-trained ACT (lerobot-train): infer what it needs from its config
            self.meta = None
        self.policy = ACTPolicy.from_pretrained(str(self.path))
        self.policy.config.device = device
        self.policy.to(device).eval()
        if temporal_ensemble_coeff is not None:
            self.policy.config.temporal_ensemble_coeff = temporal_ensemble_coeff
            self.policy.config.n_action_steps = 1
            self.policy.temporal_ensembler = ACTTemporalEnsembler(
                temporal_ensemble_coeff, self.policy.config.chunk_size
            )
        self.pre, self.post = make_pre_post_processors(
            self.policy.config,
            pretrained_path=str(self.path),
            preprocessor_overrides={"device_processor": {"device": device}},
        )
        image_keys = list(self.policy.config.image_features)
        self.cameras = tuple(F.camera_of(k) for k in image_keys)
        self.image_size = tuple(self.policy.config.image_features[image_keys[0]].shape[-2:]) if image_keys else None
        # Render at the size the training frames were recorded at, so resizing matches training.
        recorded = (self.meta or {}).get("recorded_image_size")
        self.env_state = F.ENV_STATE in self.policy.config.input_features
        self.env_state_names = list((self.meta or {}).get("env_state") or [])
        self.estimator_source = (self.meta or {}).get("pose_estimator") if self.env_state else None
        estimator = (self.estimator_source or {}).get("path")
        if self.env_state and not recorded and (self.estimator_source or {}).get("image_size"):
            recorded = self.estimator_source["image_size"]  # the size the estimator saw at recording
        self.requirements = EnvRequirements(
            obs_type="pixels_state" if (self.cameras or self.env_state) else "state",
            cameras=self.cameras,
            control_mode="joint_pos",
            image_size=tuple(recorded) if recorded else self.image_size,
            pose_estimator=estimator,
            camera_fps=(self.meta or {}).get("camera_fps"),
        )
        self.policy.reset()

    def reset(self) -> None:
        self.policy.reset()

    def observation_batch(self, obs: dict) -> dict[str, torch.Tensor]:
        """Env observation -> LeRobot batch (before the preprocessor): state and resized float images."""
        batch = {F.STATE: torch.as_tensor(np.asarray(obs["joint_pos"], np.float32))[None]}
        if self.env_state:
            from embodied_gym.perception.wrapper import KEY

            if KEY not in obs:
                raise KeyError(
                    f"the policy {self.path} reads {KEY!r} (estimated object poses) but the observation has "
                    f"{sorted(obs)}; wrap the env with PoseEstimateWrapper (make_env_for does, from the "
                    f"policy's pose estimator; `eval --pose-estimator DIR`)"
                )
            batch[F.ENV_STATE] = torch.as_tensor(np.asarray(obs[KEY], np.float32))[None]
        for cam in self.cameras:
            if cam not in obs:
                raise KeyError(
                    f"the policy needs camera {cam!r} but the observation has {sorted(obs)}; make the env "
                    f"with cameras={self.cameras} and obs_type='pixels_state'"
                )
            img = torch.as_tensor(np.ascontiguousarray(obs[cam])).permute(2, 0, 1)[None]
            batch[F.image_key(cam)] = resize_images(img, self.image_size).float().div_(255.0)
        return batch

    @torch.no_grad()
    def __call__(self, obs, info=None) -> np.ndarray:
        batch = self.pre(self.observation_batch(obs))
        action = self.post(self.policy.select_action(batch))
        return action.squeeze(0).cpu().numpy().astype(np.float32)


#: The processor steps (LeRobot registry names) an ACT folder may name: those LeRobot's ACT factory
#: (``make_act_pre_post_processors``) writes. Others registered in LeRobot load tokenizers or models.
ACT_PROCESSOR_STEPS = (
    "rename_observations_processor",
    "to_batch_processor",
    "device_processor",
    "normalizer_processor",
    "unnormalizer_processor",
)
ACT_PROCESSOR_FILES = ("policy_preprocessor.json", "policy_postprocessor.json")


def _read_json(path: Path, what: str):
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} not found: {what}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: unreadable JSON ({e})") from None


def check_act_folder(path: str | os.PathLike, trust_policy_file: bool = False) -> None:
    """Refuse an ACT ``pretrained_model`` folder that would make LeRobot import or construct anything
    but ACT and its standard processors; only JSON is read here, nothing is imported.

    ``config.json`` must have ``"type": "act"``; every step of ``policy_preprocessor.json`` and
    ``policy_postprocessor.json`` must be ``{"registry_name": <one of ACT_PROCESSOR_STEPS>, "config": {...},
    "state_file": <a .safetensors file in the folder>}`` (a ``"class"`` entry, which LeRobot imports by
    module path, is refused). ``trust_policy_file=True`` skips the step allow-list."""
    path = Path(path)
    cfg = _read_json(path / "config.json", "a LeRobot policy folder has config.json")
    if not isinstance(cfg, dict) or cfg.get("type") != "act":
        kind = cfg.get("type") if isinstance(cfg, dict) else cfg
        raise UnsafePolicyFile(
            f"{path / 'config.json'}: policy type {kind!r} is not 'act'; embodied-gym loads ACT policies from folders"
        )
    if trust_policy_file:
        return
    allowed = list(ACT_PROCESSOR_STEPS)
    for fname in ACT_PROCESSOR_FILES:
        f = path / fname
        pipe = _read_json(f, "an ACT folder has its LeRobot processors (saved by make_pre_post_processors)")
        steps = pipe.get("steps") if isinstance(pipe, dict) else None
        if not isinstance(steps, list):
            raise UnsafePolicyFile(f"{f}: expected an object with a 'steps' list")
        for i, step in enumerate(steps):
            if not isinstance(step, dict):
                raise UnsafePolicyFile(f"{f}: step {i} is {step!r}, not an object")
            name = step.get("registry_name")
            if "class" in step or name not in ACT_PROCESSOR_STEPS:
                named = step.get("class", name)
                raise UnsafePolicyFile(
                    f"{f}: step {i} names {named!r}, which is not an allowed processor step; allowed (by "
                    f"registry_name): {allowed}. A policy folder cannot name code to import; if you trust this "
                    f"folder, pass {TRUST_FLAG}"
                )
            extra = sorted(set(step) - {"registry_name", "config", "state_file"})
            if extra:
                raise UnsafePolicyFile(f"{f}: step {i} ({name}) has unexpected keys {extra}")
            if not isinstance(step.get("config", {}), dict):
                raise UnsafePolicyFile(f"{f}: step {i} ({name}) config must be an object")
            state = step.get("state_file")
            if state is not None and (
                not isinstance(state, str)
                or Path(state).name != state
                or not state.endswith(".safetensors")
                or not (path / state).is_file()
            ):
                raise UnsafePolicyFile(
                    f"{f}: step {i} ({name}) state_file {state!r} must be a .safetensors file in {path}"
                )


class SB3Agent:
    """A stable-baselines3 model (deterministic actions) as an agent, loaded without unpickling
    (:func:`load_sb3_model`; ``trust_policy_file=True`` for SB3's own loader).

    Requirements, in order of precedence: the ``control_mode`` argument; the sidecar
    ``<name>.env.json`` beside the zip (``obs_type``, ``cameras``, ``image_size``, ``control_mode``,
    ``env_id``, ``algo``; written by :func:`embodied_gym.policies.rl.save_sb3`); the model's stored
    spaces (cameras and image size from its image entries, ``obs_type`` from its keys, ``joint_pos``
    unless the action space is [-1, 1]^14, which means ``ee_delta`` or ``joint_delta``: the sidecar or
    ``control_mode`` tells which, ``ee_delta`` otherwise). Camera images whose size differs from the
    model's (an ``image_size`` override) are resized to it with the ACT code's antialiased resize."""

    name = "sb3"
    _ALGOS = ("PPO", "SAC", "A2C", "TD3", "DDPG")  # = SB3_ALGOS

    def __init__(
        self,
        path: str | os.PathLike,
        control_mode: str | None = None,
        device: str = "cpu",
        *,
        trust_policy_file: bool = False,
    ):
        path = Path(path)
        self.path = path
        self.model, self.info = load_sb3_model(path, device=device, trust_policy_file=trust_policy_file)
        self.env_meta = meta = _read_sidecar(path)
        sidecar = path.with_suffix(SB3_SIDECAR_SUFFIX)
        space = self.model.observation_space
        self._keys = tuple(space.spaces) if hasattr(space, "spaces") else None
        self._image_hw = {k: _image_hw(s.shape) for k, s in getattr(space, "spaces", {}).items() if len(s.shape) == 3}
        cams = tuple(k for k in self._image_hw if k.startswith("cam_"))
        if meta.get("cameras") is not None:
            if sorted(meta["cameras"]) != sorted(cams):
                raise ValueError(
                    f"{sidecar}: cameras {meta['cameras']} but the model's observation space has "
                    f"{list(cams)}; the sidecar belongs to another model: fix or delete it"
                )
            cams = tuple(meta["cameras"])
        sizes = sorted({self._image_hw[c] for c in cams})
        if len(sizes) > 1:
            raise ValueError(
                f"{path}: the model's cameras have different image sizes {sizes}; our envs render "
                f"every camera at one image_size"
            )
        image_size = sizes[0] if sizes else None
        if meta.get("image_size") is not None and image_size is not None and tuple(meta["image_size"]) != image_size:
            raise ValueError(f"{sidecar}: image_size {meta['image_size']} but the model takes {list(image_size)}")
        mode = control_mode or meta.get("control_mode")
        if mode is None:
            low = np.asarray(self.model.action_space.low)
            mode = "ee_delta" if np.allclose(low, -1.0) else "joint_pos"
        keys = set(self._keys or ())
        derived = ("pixels_state" if "joint_pos" in keys else "pixels") if cams else "state"
        self.requirements = EnvRequirements(
            obs_type=meta.get("obs_type") or derived, cameras=cams, control_mode=mode, image_size=image_size
        )

    def reset(self) -> None:
        pass

    def __call__(self, obs, info=None) -> np.ndarray:
        if self._keys is not None and isinstance(obs, dict):
            missing = [k for k in self._keys if k not in obs]
            if missing:
                raise KeyError(
                    f"the SB3 model needs observation keys {missing} but the observation has {sorted(obs)}; "
                    f"make the env with {self.requirements.env_kwargs()}"
                )
            obs = {k: self._sized(k, obs[k]) for k in self._keys}  # extra keys (e.g. video cameras) dropped
        action, _ = self.model.predict(obs, deterministic=True)
        return np.asarray(action, dtype=np.float32)

    def _sized(self, key, value):
        hw = self._image_hw.get(key)
        value = np.asarray(value)
        if hw is None or value.ndim != 3 or value.shape[:2] == hw or value.shape[1:] == hw:
            return value
        img = torch.as_tensor(np.ascontiguousarray(value)).permute(2, 0, 1)[None]
        return resize_images(img, hw)[0].permute(1, 2, 0).numpy()


def _image_hw(shape) -> tuple[int, int]:
    """(3, H, W) (SB3's VecTransposeImage) or (H, W, 3) -> (H, W)."""
    shape = tuple(int(s) for s in shape)
    return shape[1:] if shape[0] in (1, 3) and shape[-1] not in (1, 3) else shape[:2]


# ----------------------------------------------------------------------------- trust model
TRUST_FLAG = "--trust-policy-file"
SB3_SIDECAR_SUFFIX = ".env.json"  # model.zip -> model.env.json (written by embodied_gym.policies.rl.save_sb3)


class UnsafePolicyFile(ValueError):
    """A policy file holds something that loading it would have to execute or import (refused)."""


# ----------------------------------------------------------------------------- stable-baselines3, without unpickling
#: SB3 algorithms we load (their class names in ``stable_baselines3``).
SB3_ALGOS = ("PPO", "SAC", "A2C", "TD3", "DDPG")
# Entries SB3 pickles that only matter for training (buffers, last observation, episode statistics,
# exploration noise): set to None; the model is loaded for inference.
_SB3_TRAINING_ONLY = (
    "_last_obs",
    "_last_original_obs",
    "_last_episode_starts",
    "ep_info_buffer",
    "ep_success_buffer",
    "action_noise",
    "rollout_buffer_class",
    "replay_buffer_class",
)
_SB3_SCHEDULES = ("lr_schedule", "clip_range", "clip_range_vf", "learning_rate", "exploration_schedule")
_SPACE_TYPES = {"<class 'gymnasium.spaces.box.Box'>": "Box", "<class 'gymnasium.spaces.dict.Dict'>": "Dict"}


def _sb3_allowed_globals() -> dict[tuple[str, str], Any]:
    """The only classes a pickled SB3 entry may name: SB3's policies (of :data:`SB3_ALGOS`),
    buffers and feature extractors, torch activations and optimizers. Looked up here, never
    imported from the file."""
    import stable_baselines3 as sb3
    from stable_baselines3.common import buffers, torch_layers
    from torch import nn, optim

    objs = [cls for algo in SB3_ALGOS for cls in getattr(sb3, algo).policy_aliases.values()]
    objs += [buffers.RolloutBuffer, buffers.DictRolloutBuffer, buffers.ReplayBuffer, buffers.DictReplayBuffer]
    objs += [torch_layers.FlattenExtractor, torch_layers.NatureCNN, torch_layers.CombinedExtractor]
    objs += [
        getattr(nn, n)
        for n in ("ReLU", "Tanh", "ELU", "LeakyReLU", "GELU", "SiLU", "Sigmoid", "Softplus", "Mish", "SELU", "Identity")
    ]
    objs += [getattr(optim, n) for n in ("Adam", "AdamW", "RMSprop", "SGD")]
    return {(o.__module__, o.__qualname__): o for o in objs}


def read_pickled_data(blob: bytes, allowed: dict[tuple[str, str], Any], what: str):
    """Evaluate a pickle that holds only plain data (dicts, lists, tuples, str, numbers, bool, None)
    and references to ``allowed`` classes, WITHOUT unpickling: the opcodes are parsed with
    :mod:`pickletools` and interpreted here; any opcode that would call, build or import something
    (REDUCE, BUILD, NEWOBJ, INST, OBJ, ...) or a class outside ``allowed`` raises
    :class:`UnsafePolicyFile` naming ``what``."""
    import pickletools

    stack: list = []
    marks: list[int] = []
    memo: dict[int, Any] = {}

    def pop_mark() -> list:
        start = marks.pop()
        items = stack[start:]
        del stack[start:]
        return items

    def lookup(module: str, name: str):
        if (module, name) not in allowed:
            raise UnsafePolicyFile(
                f"{what} names {module}.{name}, which is not a class SB3 models may use "
                f"(allowed: SB3 policies, buffers, feature extractors, torch activations and "
                f"optimizers)"
            )
        return allowed[(module, name)]

    try:
        for op, arg, _pos in pickletools.genops(blob):
            name = op.name
            if name in ("PROTO", "FRAME"):
                continue
            if name == "STOP":
                break
            if name == "MARK":
                marks.append(len(stack))
            elif name in (
                "SHORT_BINUNICODE",
                "BINUNICODE",
                "BINUNICODE8",
                "UNICODE",
                "BININT",
                "BININT1",
                "BININT2",
                "LONG1",
                "BINFLOAT",
                "INT",
                "LONG",
                "FLOAT",
            ):
                stack.append(arg)
            elif name == "NONE":
                stack.append(None)
            elif name in ("NEWTRUE", "NEWFALSE"):
                stack.append(name == "NEWTRUE")
            elif name == "EMPTY_DICT":
                stack.append({})
            elif name == "EMPTY_LIST":
                stack.append([])
            elif name == "EMPTY_TUPLE":
                stack.append(())
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                n = int(name[-1])
                items = tuple(stack[-n:])
                del stack[-n:]
                stack.append(items)
            elif name == "TUPLE":
                stack.append(tuple(pop_mark()))
            elif name == "LIST":
                stack.append(pop_mark())
            elif name == "DICT":
                items = pop_mark()
                stack.append(dict(zip(items[::2], items[1::2])))
            elif name == "SETITEM":
                v, k = stack.pop(), stack.pop()
                if not isinstance(stack[-1], dict):
                    raise UnsafePolicyFile(f"{what}: malformed pickle (SETITEM on a non-dict)")
                stack[-1][k] = v
            elif name == "SETITEMS":
                items = pop_mark()
                if not isinstance(stack[-1], dict):
                    raise UnsafePolicyFile(f"{what}: malformed pickle (SETITEMS on a non-dict)")
                stack[-1].update(zip(items[::2], items[1::2]))
            elif name == "APPEND":
                v = stack.pop()
                if not isinstance(stack[-1], list):
                    raise UnsafePolicyFile(f"{what}: malformed pickle (APPEND on a non-list)")
                stack[-1].append(v)
            elif name == "APPENDS":
                items = pop_mark()
                if not isinstance(stack[-1], list):
                    raise UnsafePolicyFile(f"{what}: malformed pickle (APPENDS on a non-list)")
                stack[-1].extend(items)
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1]
            elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
                memo[int(arg)] = stack[-1]
            elif name in ("BINGET", "LONG_BINGET", "GET"):
                stack.append(memo[int(arg)])
            elif name == "STACK_GLOBAL":
                attr, module = stack.pop(), stack.pop()
                if not (isinstance(module, str) and isinstance(attr, str)):
                    raise UnsafePolicyFile(f"{what}: malformed pickle (STACK_GLOBAL without names)")
                stack.append(lookup(module, attr))
            elif name == "GLOBAL":
                module, _, attr = str(arg).partition(" ")
                stack.append(lookup(module, attr))
            else:
                raise UnsafePolicyFile(
                    f"{what} is a pickle that would run code or build objects on load (opcode "
                    f"{name}); only plain data and references to known classes are read"
                )
    except UnsafePolicyFile:
        raise
    except Exception as e:
        raise UnsafePolicyFile(f"{what}: unreadable pickle ({type(e).__name__}: {e})") from None
    if len(stack) != 1 or marks:
        raise UnsafePolicyFile(f"{what}: malformed pickle (stack of {len(stack)} items at STOP)")
    return stack[0]


def _parse_array(text: str, shape: tuple[int, ...], dtype, what: str) -> np.ndarray:
    """A bound written by numpy's ``str`` (as SB3 stores it beside the pickle) -> array of ``shape``."""
    text = str(text)
    if "..." in text:
        raise UnsafePolicyFile(f"{what}: the bound is stored summarised ({text[:60]!r}...) and cannot be read back")
    tokens = text.replace("[", " ").replace("]", " ").split()
    try:
        values = np.array([float(t) for t in tokens], dtype=np.float64)
    except ValueError:
        raise UnsafePolicyFile(f"{what}: unreadable bound {text[:80]!r}") from None
    n = int(np.prod(shape)) if shape else 1
    if values.size == 1:
        return np.full(shape, values[0]).astype(dtype)
    if values.size != n:
        raise UnsafePolicyFile(f"{what}: bound has {values.size} values, the shape {shape} needs {n}")
    return values.reshape(shape).astype(dtype)


_BOX_DTYPES = ("float32", "float64", "uint8", "int8", "int16", "int32", "int64")


def _make_box(low_text, high_text, shape, dtype, what: str):
    from gymnasium import spaces

    if str(dtype) not in _BOX_DTYPES:
        raise UnsafePolicyFile(f"{what}: dtype {dtype!r} is not one of {list(_BOX_DTYPES)}")
    shape = tuple(int(s) for s in shape)
    dt = np.dtype(str(dtype))
    return spaces.Box(_parse_array(low_text, shape, dt, what), _parse_array(high_text, shape, dt, what), shape, dt)


def _space_from_fields(entry: dict, what: str):
    """A gymnasium Box or Dict rebuilt from the readable fields SB3 stores beside a pickled space
    (``_shape``, ``dtype``, ``low``, ``high``; a Dict's ``spaces`` repr), then checked to print
    exactly as stored."""
    import re

    from gymnasium import spaces

    kind = _SPACE_TYPES.get(entry.get(":type:"))
    if kind == "Box":
        box = _make_box(entry.get("low"), entry.get("high"), entry.get("_shape") or (), entry.get("dtype"), what)
        if str(box.low) != entry.get("low") or str(box.high) != entry.get("high"):
            raise UnsafePolicyFile(f"{what}: the bounds read back differ from the stored ones")
        return box
    if kind == "Dict":
        text = entry.get("spaces")
        if not isinstance(text, str):
            raise UnsafePolicyFile(f"{what}: no readable 'spaces' field")
        pat = re.compile(r"'([A-Za-z0-9_.\-]+)': Box\((.*?), (.*?), \(([0-9, ]*)\), (\w+)\)", re.S)
        parts = {}
        for m in pat.finditer(text):
            key, low, high, shape, dtype = m.groups()
            shape_t = tuple(int(s) for s in shape.replace(" ", "").split(",") if s)
            parts[key] = _make_box(low, high, shape_t, dtype, f"{what}[{key!r}]")
        space = spaces.Dict(parts)
        if not parts or str(space.spaces) != text:
            raise UnsafePolicyFile(
                f"{what}: only Dicts of Boxes can be read without unpickling; stored: {text[:120]!r}"
            )
        return space
    raise UnsafePolicyFile(
        f"{what}: space type {entry.get(':type:')!r} cannot be read without unpickling "
        f"(readable: gymnasium Box and Dict of Boxes)"
    )


def _constant_schedule(entry, default: float):
    """A schedule entry -> SB3's constant schedule (the value stored readably, else ``default``); only
    training reads schedules."""
    import re

    from stable_baselines3.common.utils import FloatSchedule

    if isinstance(entry, (int, float)):
        return FloatSchedule(float(entry))
    m = re.fullmatch(r"ConstantSchedule\(val=([-+0-9.eE]+)\)", str(entry.get("value_schedule", "")))
    return FloatSchedule(float(m.group(1)) if m else default)


@dataclass
class SB3ZipInfo:
    """What a stable-baselines3 zip holds, read without unpickling."""

    path: Path
    algo: str  # one of SB3_ALGOS
    policy_class: type
    observation_space: Any
    action_space: Any
    custom_objects: dict[str, Any]  # every pickled entry, replaced by a safely rebuilt value
    sb3_version: str | None


def inspect_sb3_zip(path: str | os.PathLike, raw: bytes | None = None) -> SB3ZipInfo:
    """Read a stable-baselines3 ``.zip`` without unpickling anything.

    The ``data`` member is JSON in which SB3 stores some values as base64 cloudpickle (``:serialized:``).
    None of those is unpickled: the policy class (and buffer, activation, optimizer classes in
    ``policy_kwargs``) are read from the pickle's opcodes and must be allow-listed classes of
    :data:`SB3_ALGOS`; observation and action spaces are rebuilt from the readable fields stored beside
    the pickle; schedules become constants; training-only state (buffers, noise, last observation) is
    dropped (an off-policy model's replay buffer is made with one slot). Anything else raises
    :class:`UnsafePolicyFile` naming the entry and ``--trust-policy-file``."""
    import base64
    import io

    path = Path(path)
    if raw is None:
        raw = path.read_bytes()
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as z:
            names = z.namelist()
            data = json.loads(z.read("data"))
            version = (
                z.read("_stable_baselines3_version").decode(errors="replace")
                if "_stable_baselines3_version" in names
                else None
            )
    except (zipfile.BadZipFile, KeyError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(
            f"{path} is not a stable-baselines3 model zip (a zip with a JSON 'data' member): {e}"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the zip's 'data' member is not a JSON object")
    allowed = _sb3_allowed_globals()
    hint = (
        f"; refusing to load {path}. If you trust this file (it can run any code when unpickled), pass "
        f"{TRUST_FLAG} to use stable-baselines3's own loader"
    )

    def serialized(key) -> bytes | None:
        entry = data.get(key)
        if isinstance(entry, dict) and ":serialized:" in entry:
            try:
                return base64.b64decode(str(entry[":serialized:"]).encode(), validate=True)
            except ValueError:
                raise UnsafePolicyFile(f"{path}: entry {key!r} is not base64{hint}") from None
        return None

    try:
        blob = serialized("policy_class")
        if blob is None:
            raise UnsafePolicyFile(f"{path}: no pickled 'policy_class' entry (not saved by stable-baselines3?)")
        policy_class = read_pickled_data(blob, allowed, f"{path}: entry 'policy_class'")
        import stable_baselines3 as sb3

        owners = [a for a in SB3_ALGOS if policy_class in getattr(sb3, a).policy_aliases.values()]
        if not owners:
            raise UnsafePolicyFile(f"{path}: policy_class {policy_class!r} is not a policy of {SB3_ALGOS}")
        if set(owners) >= {"PPO", "A2C"}:  # the same ActorCriticPolicy classes: PPO stores n_epochs/clip_range
            algo = "PPO" if ("n_epochs" in data or "clip_range" in data) else "A2C"
        elif set(owners) >= {"TD3", "DDPG"}:  # DDPG is TD3 with one critic, no delay, no target smoothing
            algo = "DDPG" if data.get("policy_delay") == 1 and data.get("target_noise_clip") == 0.0 else "TD3"
        else:
            algo = owners[0]
        custom: dict[str, Any] = {"policy_class": policy_class}
        if isinstance(data.get("buffer_size"), int):  # off-policy: no replay buffer of training size for inference
            custom["buffer_size"] = 1
        for key in ("observation_space", "action_space"):
            if not (isinstance(data.get(key), dict) and ":serialized:" in data[key]):
                raise UnsafePolicyFile(f"{path}: no stored {key!r}")
            custom[key] = _space_from_fields(data[key], f"{path}: {key}")
        for key, entry in data.items():
            if key in custom or serialized(key) is None:
                continue
            if key in _SB3_TRAINING_ONLY:
                custom[key] = None
            elif key in _SB3_SCHEDULES:
                custom[key] = _constant_schedule(
                    entry,
                    float(data.get("learning_rate", 0.0))
                    if isinstance(data.get("learning_rate"), (int, float))
                    else 0.0,
                )
            elif key == "train_freq":
                from stable_baselines3.common.type_aliases import TrainFreq, TrainFrequencyUnit

                custom[key] = TrainFreq(1, TrainFrequencyUnit.STEP)
            elif key == "policy_kwargs":
                kw = read_pickled_data(serialized(key), allowed, f"{path}: entry 'policy_kwargs'")
                if not isinstance(kw, dict):
                    raise UnsafePolicyFile(f"{path}: policy_kwargs is not a dict")
                custom[key] = kw
            else:
                raise UnsafePolicyFile(
                    f"{path}: entry {key!r} is pickled ({entry.get(':type:')}) and is not one "
                    f"embodied-gym can rebuild without unpickling"
                )
    except UnsafePolicyFile as e:
        msg = str(e)
        raise UnsafePolicyFile(msg if TRUST_FLAG in msg else msg + hint) from None
    return SB3ZipInfo(path, algo, policy_class, custom["observation_space"], custom["action_space"], custom, version)


def load_sb3_model(path: str | os.PathLike, device: str = "cpu", trust_policy_file: bool = False):
    """A stable-baselines3 model from ``path`` -> (model, :class:`SB3ZipInfo` or None).

    Default: :func:`inspect_sb3_zip`, then SB3's loader with every pickled entry supplied through
    ``custom_objects`` (so SB3 unpickles nothing) and the weights read by ``torch.load(weights_only=True)``
    (SB3 2.x does so for every ``.pth`` member), all from the one in-memory copy of the file that was
    inspected. ``trust_policy_file=True``: SB3's own ``load`` (unpickles the file; only for files you trust)."""
    import io

    import stable_baselines3 as sb3

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"stable-baselines3 model {path} not found")
    raw = path.read_bytes()
    if trust_policy_file:
        try:
            info = inspect_sb3_zip(path, raw)
            algo = info.algo
        except UnsafePolicyFile:
            info, algo = None, _read_sidecar(path).get("algo")
            if algo not in SB3_ALGOS:
                algo = _sb3_algo_name_unsafe(raw)
        return getattr(sb3, algo).load(io.BytesIO(raw), device=device), info
    info = inspect_sb3_zip(path, raw)
    try:
        model = getattr(sb3, info.algo).load(io.BytesIO(raw), device=device, custom_objects=info.custom_objects)
    except (RuntimeError, KeyError, ValueError, TypeError) as e:
        raise ValueError(
            f"{path}: stable-baselines3 could not rebuild the {info.algo} model from its safely read "
            f"parts ({type(e).__name__}: {e}); if you trust the file, pass {TRUST_FLAG}"
        ) from None
    return model, info


def _sb3_algo_name_unsafe(raw: bytes) -> str:
    """--trust-policy-file only: the algorithm named in the (unreadable) pickle's bytes, PPO if none."""
    for algo in ("sac", "td3", "ddpg", "a2c", "ppo"):
        if f"stable_baselines3.{algo}".encode() in raw:
            return algo.upper()
    return "PPO"


def _read_sidecar(path: Path) -> dict:
    """``<model>.env.json`` beside an SB3 zip (see :func:`embodied_gym.policies.rl.save_sb3`), validated."""
    sidecar = path.with_suffix(SB3_SIDECAR_SUFFIX)
    if not sidecar.exists():
        return {}
    try:
        meta = json.loads(sidecar.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{sidecar}: unreadable env settings ({e}); fix or delete it") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{sidecar}: expected a JSON object of env settings")
    checks = {"env_id": str, "obs_type": str, "control_mode": str, "algo": str, "cameras": list, "image_size": list}
    for key, typ in checks.items():
        if key in meta and meta[key] is not None and not isinstance(meta[key], typ):
            raise ValueError(f"{sidecar}: {key!r} must be a {typ.__name__}, got {meta[key]!r}")
    if meta.get("image_size") is not None and (
        len(meta["image_size"]) != 2 or not all(isinstance(v, int) for v in meta["image_size"])
    ):
        raise ValueError(f"{sidecar}: 'image_size' must be [height, width] integers, got {meta['image_size']!r}")
    return meta


def load_agent(
    spec: str,
    device: str = "cpu",
    temporal_ensemble_coeff: float | None = None,
    control_mode: str | None = None,
    *,
    cameras=None,
    image_size=None,
    trust_policy_file: bool = False,
    pose_estimator: str | os.PathLike | None = None,
):
    """``"expert"``, an SB3 ``.zip`` or an ACT folder -> an agent (see the module docstring).

    ``cameras``, ``image_size`` (H, W) and ``control_mode`` override the settings the policy was trained
    with: ``cameras`` must include the policy's (extra ones are rendered, e.g. for videos), images are
    rendered at ``image_size`` and resized to the policy's input size. ``trust_policy_file`` loads with
    the library's own loader (it can run code from the file; only for files you trust).
    ``pose_estimator`` replaces the estimator folder of a policy that reads estimated object poses
    (default: the one its training data was recorded with)."""
    if spec == "expert":
        agent = ExpertAgent(control_mode or "joint_pos")
    else:
        p = Path(spec)
        if p.suffix == ".zip":
            agent = SB3Agent(p, control_mode=control_mode, device=device, trust_policy_file=trust_policy_file)
        elif p.is_dir():
            agent = ACTAgent(
                p, device=device, temporal_ensemble_coeff=temporal_ensemble_coeff, trust_policy_file=trust_policy_file
            )
            if control_mode is not None and control_mode != agent.requirements.control_mode:
                raise ValueError(
                    f"{spec}: ACT policies act in control_mode={agent.requirements.control_mode!r}, "
                    f"not {control_mode!r}"
                )
        else:
            raise FileNotFoundError(
                f"cannot load policy {spec!r}: give 'expert', a stable-baselines3 .zip, or an ACT "
                f"folder (from `embodied-gym train act --out DIR`)"
            )
    req = agent.requirements
    if pose_estimator is not None:
        if not getattr(agent, "env_state", False):
            raise ValueError(
                f"--pose-estimator {pose_estimator}: policy {spec!r} does not read estimated object poses "
                f"(it has no {F.ENV_STATE} input)"
            )
        req.pose_estimator = str(pose_estimator)
        agent.estimator_overridden = True
    if cameras:
        from embodied_gym.envs.spaces import normalise_cameras

        cameras = normalise_cameras(cameras)
        missing = [c for c in req.cameras if c not in cameras]
        if missing:
            raise ValueError(
                f"policy {spec!r} needs cameras {list(req.cameras)}; --cameras {' '.join(cameras)} lacks {missing}"
            )
        req.cameras = tuple(cameras)
        if req.obs_type == "state":
            req.obs_type = "pixels_state"
    if image_size:
        from embodied_gym.envs.spaces import normalise_image_size

        req.image_size = normalise_image_size(image_size)
    return agent


def make_env_for(
    agent,
    env_id: str,
    *,
    physics=None,
    visaligner: str | None = None,
    robot_config: str | None = None,
    render_mode: str | None = None,
    extra_cameras: tuple[str, ...] = (),
    visaligner_steps: int | None = None,
    pose_estimator: str | os.PathLike | None = None,
    pose_update: str | None = None,
    **kwargs,
):
    """The env ``env_id`` made with what ``agent`` needs (sim, Real or VisAligner-wrapped sim;
    ``visaligner_steps`` denoising steps per generated frame, default the model's), through
    :func:`embodied_gym.factory.make_env`. A policy that reads estimated object poses gets the env
    wrapped with its pose estimator (``agent.requirements.pose_estimator``) and the camera and
    image size the estimator reads; ``pose_estimator`` replaces that folder, or wraps the env of an
    agent that reads no estimate (e.g. the expert, to record the estimate). ``pose_update``
    (``"every_frame"`` / ``"at_reset"``) overrides when the estimate is refreshed; by default the
    policy's data decides (its recording's ``pose_estimator.update``, else ``every_frame``).

    Raises:
        FileNotFoundError: the policy's pose estimator folder is missing.
        ValueError: the policy names no estimator, or the folder holds other weights or outputs than
            the policy was trained with.
    """
    from embodied_gym.factory import make_env

    kw = agent.requirements.env_kwargs()
    if extra_cameras:
        cams = tuple(dict.fromkeys(tuple(kw.get("cameras", ())) + tuple(extra_cameras)))
        kw["cameras"] = cams
        if kw["obs_type"] == "state":
            kw["obs_type"] = "pixels_state"
    kw.update(kwargs)
    if render_mode:
        kw["render_mode"] = render_mode
    if pose_estimator is not None and getattr(agent, "env_state", False):
        agent.requirements.pose_estimator, agent.estimator_overridden = str(pose_estimator), True
        pose_estimator = None
    estimator = pose_estimator if pose_estimator is not None else _estimator_for(agent)
    if estimator is not None:
        recorded = (getattr(agent, "estimator_source", None) or {}).get("update", "every_frame")
        kw["pose_update"] = pose_update or recorded
    env = make_env(
        env_id,
        robot_config=robot_config,
        physics=physics,
        visaligner=visaligner,
        visaligner_steps=visaligner_steps,
        pose_estimator=estimator,
        **kw,
    )
    if getattr(agent, "env_state", False):
        _check_estimate_fits(agent, env)
    if isinstance(agent, ExpertAgent):
        agent.bind(env)
    return env


def _estimator_for(agent) -> str | None:
    """The pose estimator folder ``agent`` needs (None if it reads no estimate), checked to exist and,
    unless overridden, to hold the weights the policy's data was recorded with."""
    if not getattr(agent, "env_state", False):
        return None
    folder = agent.requirements.pose_estimator
    where = agent.path / POLICY_META
    if not folder:
        raise ValueError(
            f"policy {agent.path} reads estimated object poses ({F.ENV_STATE}) but {where} names no pose "
            f"estimator (its dataset was not recorded with --pose-estimator); pass the estimator folder "
            f"with `eval --pose-estimator DIR` (load_agent(pose_estimator=...))"
        )
    from embodied_gym.perception.wrapper import estimator_source

    try:
        have = estimator_source(folder)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"the pose estimator {folder} that policy {agent.path} reads ({where}: "
            f"pose_estimator.path) is not there; restore it or pass another with "
            f"`eval --pose-estimator DIR`"
        ) from None
    want = (agent.estimator_source or {}).get("sha256")
    if want and have["sha256"] != want and not getattr(agent, "estimator_overridden", False):
        raise ValueError(
            f"the pose estimator {folder} now holds other weights (sha256 {have['sha256'][:12]}...) than "
            f"the ones policy {agent.path} was trained with ({want[:12]}..., {where}); pass "
            f"`eval --pose-estimator {folder}` to use them anyway, or restore the original"
        )
    return folder


def _check_estimate_fits(agent, env) -> None:
    from embodied_gym.perception.wrapper import KEY

    names = agent.env_state_names
    dim = agent.policy.config.input_features[F.ENV_STATE].shape[0]
    got = env.observation_space[KEY]
    est = env.get_wrapper_attr("estimator").config
    if got.shape != (dim,) or (names and list(est.output_names) != names):
        env.close()
        raise ValueError(
            f"the pose estimator gives {list(est.output_names)} but policy {agent.path} was trained on "
            f"{names or dim} ({F.ENV_STATE}); use an estimator of the same task and outputs"
        )


def make_agent(spec: str, env, *, trust_policy_file: bool = False) -> Callable:
    """``agent(obs, info) -> action`` for ``spec`` ("expert", an ACT folder, an SB3 ``.zip``) acting in
    ``env``; it resets itself at every episode start.

    Raises:
        ValueError: the policy needs a control mode or cameras ``env`` does not have (the message
            says which).
    """
    import embodied_gym

    if spec == "expert":
        return embodied_gym.make_expert(env)
    agent = load_agent(spec, trust_policy_file=trust_policy_file)
    need, have = agent.requirements, env.unwrapped
    if need.control_mode != have.control_mode or not set(need.cameras) <= set(have.cameras):
        raise ValueError(
            f"policy {spec!r} needs control_mode={need.control_mode!r} and cameras "
            f"{list(need.cameras)}; the env has control_mode={have.control_mode!r} and cameras "
            f"{list(have.cameras)} (record with --cameras {' '.join(need.cameras) or 'cam_high'})"
        )
    agent.reset()
    return _ResettingAgent(agent)


class _ResettingAgent:
    """Calls the agent's ``reset()`` when a new episode starts (``info["step"] == 0``)."""

    def __init__(self, agent):
        self.agent = agent

    def __call__(self, obs, info):
        if info.get("step") == 0:
            self.agent.reset()
        return self.agent(obs, info)
