"""The trust model of policy files (docs/policies.md): loading a policy never runs code from it.

- stable-baselines3 ``.zip``: :func:`inspect_sb3_zip` reads the zip without unpickling anything (a
  pickle-opcode reader, :func:`read_pickled_data`, evaluates the plain-data pickles and looks up
  allow-listed classes; spaces are rebuilt from their readable fields), and :func:`load_sb3_model`
  hands SB3's loader those safely rebuilt parts. :func:`read_sb3_sidecar` reads the env settings
  saved beside the zip.
- LeRobot ACT folder: :func:`check_act_folder` checks its config and processor files against
  allow-lists (:data:`ACT_PROCESSOR_STEPS`) before LeRobot reads them.

A refused file raises :class:`UnsafePolicyFile`, whose message names :data:`TRUST_FLAG`
(``eval --trust-policy-file``): with ``trust_policy_file=True`` the library's own loader is used
instead (it can run code from the file; only for files you trust). The agents that use these
loaders are in :mod:`embodied_gym.policies.agents`.
"""

from __future__ import annotations

import json
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

TRUST_FLAG = "--trust-policy-file"
SB3_SIDECAR_SUFFIX = ".env.json"  # model.zip -> model.env.json (written by embodied_gym.policies.rl.save_sb3)


class UnsafePolicyFile(ValueError):
    """A policy file holds something that loading it would have to execute or import (refused)."""


# ----------------------------------------------------------------------------- LeRobot ACT folders
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


_PICKLE_LITERALS = frozenset(
    {
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
    }
)  # opcodes that push their argument
_PICKLE_EMPTY = {"EMPTY_DICT": dict, "EMPTY_LIST": list, "EMPTY_TUPLE": tuple}


@dataclass
class _PickleMachine:
    """The state of :func:`read_pickled_data`'s opcode interpreter: the pickle machine's stack, marks
    and memo, the classes a pickle may name and ``what`` (for messages)."""

    allowed: dict[tuple[str, str], Any]
    what: str
    stack: list = field(default_factory=list)
    marks: list[int] = field(default_factory=list)
    memo: dict[int, Any] = field(default_factory=dict)

    def pop_mark(self) -> list:
        start = self.marks.pop()
        items = self.stack[start:]
        del self.stack[start:]
        return items

    def top(self, kind: type, op: str):
        """The item on top of the stack, which ``op`` adds to; it must be a ``kind``."""
        top = self.stack[-1]
        if not isinstance(top, kind):
            raise UnsafePolicyFile(f"{self.what}: malformed pickle ({op} on a non-{kind.__name__})")
        return top

    def lookup(self, module: str, name: str):
        if (module, name) not in self.allowed:
            raise UnsafePolicyFile(
                f"{self.what} names {module}.{name}, which is not a class SB3 models may use "
                f"(allowed: SB3 policies, buffers, feature extractors, torch activations and "
                f"optimizers)"
            )
        return self.allowed[(module, name)]


def _push_value(m: _PickleMachine, name: str, arg) -> bool:
    """Opcodes that push a literal or an empty container (False: ``name`` is not one)."""
    if name in _PICKLE_LITERALS:
        m.stack.append(arg)
    elif name == "NONE":
        m.stack.append(None)
    elif name in ("NEWTRUE", "NEWFALSE"):
        m.stack.append(name == "NEWTRUE")
    elif name in _PICKLE_EMPTY:
        m.stack.append(_PICKLE_EMPTY[name]())
    else:
        return False
    return True


def _build_container(m: _PickleMachine, name: str) -> bool:
    """Opcodes that gather stack items into a tuple, list or dict, or add them to one (False:
    ``name`` is not one)."""
    stack = m.stack
    if name in ("TUPLE1", "TUPLE2", "TUPLE3"):
        n = int(name[-1])
        items = tuple(stack[-n:])
        del stack[-n:]
        stack.append(items)
    elif name == "TUPLE":
        stack.append(tuple(m.pop_mark()))
    elif name == "LIST":
        stack.append(m.pop_mark())
    elif name == "DICT":
        pairs = m.pop_mark()
        stack.append(dict(zip(pairs[::2], pairs[1::2])))
    elif name == "SETITEM":
        v, k = stack.pop(), stack.pop()
        m.top(dict, name)[k] = v
    elif name == "SETITEMS":
        pairs = m.pop_mark()
        m.top(dict, name).update(zip(pairs[::2], pairs[1::2]))
    elif name == "APPEND":
        v = stack.pop()
        m.top(list, name).append(v)
    elif name == "APPENDS":
        values = m.pop_mark()
        m.top(list, name).extend(values)
    else:
        return False
    return True


def _memo_or_global(m: _PickleMachine, name: str, arg) -> bool:
    """Opcodes that store or fetch a memo entry or name an allow-listed class (False: ``name`` is
    not one)."""
    if name == "MEMOIZE":
        m.memo[len(m.memo)] = m.stack[-1]
    elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
        m.memo[int(arg)] = m.stack[-1]
    elif name in ("BINGET", "LONG_BINGET", "GET"):
        m.stack.append(m.memo[int(arg)])
    elif name == "STACK_GLOBAL":
        attr, module = m.stack.pop(), m.stack.pop()
        if not (isinstance(module, str) and isinstance(attr, str)):
            raise UnsafePolicyFile(f"{m.what}: malformed pickle (STACK_GLOBAL without names)")
        m.stack.append(m.lookup(module, attr))
    elif name == "GLOBAL":
        module, _, attr = str(arg).partition(" ")
        m.stack.append(m.lookup(module, attr))
    else:
        return False
    return True


def _run_opcode(m: _PickleMachine, name: str, arg) -> None:
    """Interpret one opcode; one that would call, build or import something raises."""
    if name == "MARK":
        m.marks.append(len(m.stack))
    elif not (_push_value(m, name, arg) or _build_container(m, name) or _memo_or_global(m, name, arg)):
        raise UnsafePolicyFile(
            f"{m.what} is a pickle that would run code or build objects on load (opcode "
            f"{name}); only plain data and references to known classes are read"
        )


def read_pickled_data(blob: bytes, allowed: dict[tuple[str, str], Any], what: str):
    """Evaluate a pickle that holds only plain data (dicts, lists, tuples, str, numbers, bool, None)
    and references to ``allowed`` classes, WITHOUT unpickling: the opcodes are parsed with
    :mod:`pickletools` and interpreted here; any opcode that would call, build or import something
    (REDUCE, BUILD, NEWOBJ, INST, OBJ, ...) or a class outside ``allowed`` raises
    :class:`UnsafePolicyFile` naming ``what``."""
    import pickletools

    machine = _PickleMachine(allowed, what)
    try:
        for op, arg, _pos in pickletools.genops(blob):
            if op.name in ("PROTO", "FRAME"):
                continue
            if op.name == "STOP":
                break
            _run_opcode(machine, op.name, arg)
    except UnsafePolicyFile:
        raise
    except Exception as e:
        raise UnsafePolicyFile(f"{what}: unreadable pickle ({type(e).__name__}: {e})") from None
    if len(machine.stack) != 1 or machine.marks:
        raise UnsafePolicyFile(f"{what}: malformed pickle (stack of {len(machine.stack)} items at STOP)")
    return machine.stack[0]


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

    kind = _SPACE_TYPES.get(str(entry.get(":type:")))  # str(): a missing or odd type names no kind
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


def _read_sb3_data(path: Path, raw: bytes) -> tuple[dict, str | None]:
    """The zip's ``data`` member (a JSON object) and the SB3 version it was saved with (None if not stored)."""
    import io

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
    return data, version


def _sb3_algo(policy_class: type, data: dict, path: Path) -> str:
    """Which of :data:`SB3_ALGOS` saved the zip: the one whose policy ``policy_class`` is (for the
    classes two algorithms share, told apart by the hyperparameters stored in ``data``)."""
    import stable_baselines3 as sb3

    owners = [a for a in SB3_ALGOS if policy_class in getattr(sb3, a).policy_aliases.values()]
    if not owners:
        raise UnsafePolicyFile(f"{path}: policy_class {policy_class!r} is not a policy of {SB3_ALGOS}")
    if set(owners) >= {"PPO", "A2C"}:  # the same ActorCriticPolicy classes: PPO stores n_epochs/clip_range
        return "PPO" if ("n_epochs" in data or "clip_range" in data) else "A2C"
    if set(owners) >= {"TD3", "DDPG"}:  # DDPG is TD3 with one critic, no delay, no target smoothing
        return "DDPG" if data.get("policy_delay") == 1 and data.get("target_noise_clip") == 0.0 else "TD3"
    return owners[0]


@dataclass
class _SB3Data:
    """A zip's ``data`` entries, read as :func:`inspect_sb3_zip` reads them: no pickle is unpickled."""

    path: Path
    data: dict
    allowed: dict[tuple[str, str], Any]  # the classes a pickled entry may name (_sb3_allowed_globals)
    hint: str  # ends a refusal: names the file and TRUST_FLAG

    def serialized(self, key) -> bytes | None:
        """Entry ``key``'s pickle bytes (None: the entry is not pickled)."""
        import base64

        entry = self.data.get(key)
        if isinstance(entry, dict) and ":serialized:" in entry:
            try:
                return base64.b64decode(str(entry[":serialized:"]).encode(), validate=True)
            except ValueError:
                raise UnsafePolicyFile(f"{self.path}: entry {key!r} is not base64{self.hint}") from None
        return None

    def policy_class(self) -> type:
        """The allow-listed policy class the ``policy_class`` pickle names."""
        blob = self.serialized("policy_class")
        if blob is None:
            raise UnsafePolicyFile(f"{self.path}: no pickled 'policy_class' entry (not saved by stable-baselines3?)")
        return read_pickled_data(blob, self.allowed, f"{self.path}: entry 'policy_class'")

    def custom_objects(self, policy_class: type) -> dict[str, Any]:
        """Every pickled entry, replaced by a safely rebuilt value (:func:`_rebuilt_entry`; spaces
        from their readable fields); an off-policy model's replay buffer gets one slot."""
        data = self.data
        custom: dict[str, Any] = {"policy_class": policy_class}
        if isinstance(data.get("buffer_size"), int):  # off-policy: no replay buffer of training size for inference
            custom["buffer_size"] = 1
        for key in ("observation_space", "action_space"):
            if not (isinstance(data.get(key), dict) and ":serialized:" in data[key]):
                raise UnsafePolicyFile(f"{self.path}: no stored {key!r}")
            custom[key] = _space_from_fields(data[key], f"{self.path}: {key}")
        for key, entry in data.items():
            blob = None if key in custom else self.serialized(key)
            if blob is not None:
                custom[key] = _rebuilt_entry(self, key, entry, blob)
        return custom


def _rebuilt_entry(entries: _SB3Data, key: str, entry: dict, blob: bytes):
    """The value that replaces pickled entry ``key`` (``blob``: its pickle): None for training-only
    state, a constant for a schedule, one-step ``train_freq``, the read ``policy_kwargs``; any other
    pickled entry raises."""
    if key in _SB3_TRAINING_ONLY:
        return None
    if key in _SB3_SCHEDULES:
        lr = entries.data.get("learning_rate")
        return _constant_schedule(entry, float(lr) if isinstance(lr, (int, float)) else 0.0)
    if key == "train_freq":
        from stable_baselines3.common.type_aliases import TrainFreq, TrainFrequencyUnit

        return TrainFreq(1, TrainFrequencyUnit.STEP)
    if key == "policy_kwargs":
        kw = read_pickled_data(blob, entries.allowed, f"{entries.path}: entry 'policy_kwargs'")
        if not isinstance(kw, dict):
            raise UnsafePolicyFile(f"{entries.path}: policy_kwargs is not a dict")
        return kw
    raise UnsafePolicyFile(
        f"{entries.path}: entry {key!r} is pickled ({entry.get(':type:')}) and is not one "
        f"embodied-gym can rebuild without unpickling"
    )


def inspect_sb3_zip(path: str | os.PathLike, raw: bytes | None = None) -> SB3ZipInfo:
    """Read a stable-baselines3 ``.zip`` without unpickling anything.

    The ``data`` member is JSON in which SB3 stores some values as base64 cloudpickle (``:serialized:``).
    None of those is unpickled: the policy class (and buffer, activation, optimizer classes in
    ``policy_kwargs``) are read from the pickle's opcodes and must be allow-listed classes of
    :data:`SB3_ALGOS`; observation and action spaces are rebuilt from the readable fields stored beside
    the pickle; schedules become constants; training-only state (buffers, noise, last observation) is
    dropped (an off-policy model's replay buffer is made with one slot). Anything else raises
    :class:`UnsafePolicyFile` naming the entry and ``--trust-policy-file``."""
    path = Path(path)
    if raw is None:
        raw = path.read_bytes()
    data, version = _read_sb3_data(path, raw)
    hint = (
        f"; refusing to load {path}. If you trust this file (it can run any code when unpickled), pass "
        f"{TRUST_FLAG} to use stable-baselines3's own loader"
    )
    entries = _SB3Data(path, data, _sb3_allowed_globals(), hint)
    try:
        policy_class = entries.policy_class()
        algo = _sb3_algo(policy_class, data, path)
        custom = entries.custom_objects(policy_class)
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
            info, algo = None, str(read_sb3_sidecar(path).get("algo"))  # "None" when absent: not an algo
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


def read_sb3_sidecar(path: Path) -> dict:
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


__all__ = [
    "ACT_PROCESSOR_FILES",
    "ACT_PROCESSOR_STEPS",
    "SB3_ALGOS",
    "SB3_SIDECAR_SUFFIX",
    "TRUST_FLAG",
    "SB3ZipInfo",
    "UnsafePolicyFile",
    "check_act_folder",
    "inspect_sb3_zip",
    "load_sb3_model",
    "read_pickled_data",
    "read_sb3_sidecar",
]
