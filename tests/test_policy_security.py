"""Loading a policy never runs code from the file; SB3 policies evaluate at the settings they were
trained with (issue 15, items 1 and 3)."""

import base64
import json
import pickle
import shutil
import zipfile

import gymnasium as gym
import numpy as np
import pytest
import stable_baselines3 as sb3

import embodied_gym  # noqa: F401  (registers the ids)
from embodied_gym.cli import main
from embodied_gym.policies.agents import load_agent
from embodied_gym.policies.evaluate import evaluate_policy
from embodied_gym.policies.rl import save_sb3
from embodied_gym.policies.safe_loading import (
    ACT_PROCESSOR_STEPS,
    UnsafePolicyFile,
    inspect_sb3_zip,
    read_pickled_data,
)

ENV = "EmbodieDreamer-PickCup-v0"


class _TouchFile:
    """Unpickling this opens (creates) a file: the stand-in for any code a pickle can run."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.fixture(scope="module")
def state_ppo(tmp_path_factory):
    """A genuine PPO (MultiInputPolicy) saved by SB3 on a state env, ee_delta control."""
    env = gym.make(ENV, obs_type="state", control_mode="ee_delta", max_episode_steps=5)
    model = sb3.PPO("MultiInputPolicy", env, n_steps=8, batch_size=8, seed=0, device="cpu")
    path = tmp_path_factory.mktemp("sb3") / "ppo.zip"
    model.save(str(path))
    env.close()
    return path


def _rewrite_zip(src, dst, edit):
    """Copy an SB3 zip, with its ``data`` JSON changed by ``edit(dict)``."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            raw = zin.read(item.filename)
            if item.filename == "data":
                data = json.loads(raw)
                edit(data)
                raw = json.dumps(data).encode()
            zout.writestr(item, raw)
    return dst


def _payload(marker) -> str:
    # the old check only searched the decoded bytes for "stable_baselines3.ppo": put it in
    blob = pickle.dumps({"stable_baselines3.ppo": 1, "x": _TouchFile(marker)}, protocol=4)
    return base64.b64encode(blob).decode()


@pytest.mark.parametrize(
    "entry,refused",
    [
        ("policy_class", True),
        ("my_extra_entry", True),
        ("policy_kwargs", True),
        ("observation_space", False),
        ("lr_schedule", False),
    ],
)
def test_crafted_sb3_zip_runs_no_code(state_ppo, tmp_path, entry, refused, capsys):
    """A pickle payload in any entry never runs: entries embodied-gym needs from a pickle (the policy class,
    policy_kwargs) are refused; those it rebuilds from readable fields (spaces, schedules) are ignored."""
    marker = tmp_path / "pwned"

    def edit(data):
        data[entry] = dict(data.get(entry) or {}, **{":serialized:": _payload(marker)})
        data[entry].setdefault(":type:", "<class 'abc.ABCMeta'>")

    evil = _rewrite_zip(state_ppo, tmp_path / "evil.zip", edit)
    if not refused:
        agent = load_agent(str(evil))
        assert agent(agent.model.observation_space.sample()).shape == (14,) and not marker.exists()
        return
    with pytest.raises(UnsafePolicyFile, match="--trust-policy-file") as e:
        load_agent(str(evil))
    assert str(evil) in str(e.value) and repr(entry) in str(e.value) and not marker.exists()
    # the eval command: a one-line error, no file
    assert main(["eval", "--policy", str(evil), "--env", ENV, "--episodes", "1"]) == 2
    assert "--trust-policy-file" in capsys.readouterr().err and not marker.exists()


def test_trust_policy_file_is_sb3s_own_loader(state_ppo, tmp_path):
    """--trust-policy-file does what it says: SB3's loader, which unpickles (here: creates the file)."""
    marker = tmp_path / "pwned"
    evil = _rewrite_zip(
        state_ppo, tmp_path / "evil.zip", lambda d: d["policy_class"].__setitem__(":serialized:", _payload(marker))
    )
    with pytest.raises(Exception):  # noqa: B017  (the payload's result is no policy class)
        load_agent(str(evil), trust_policy_file=True)
    assert marker.exists()


def test_pickle_reader_refuses_calls_and_unknown_classes():
    allowed = {("builtins", "dict"): dict}
    assert read_pickled_data(pickle.dumps({"a": [1, 2.5, (True, None)], "b": "x"}), allowed, "t") == {
        "a": [1, 2.5, (True, None)],
        "b": "x",
    }
    with pytest.raises(UnsafePolicyFile, match="os.system|posix.system"):
        read_pickled_data(pickle.dumps(__import__("os").system), allowed, "t")
    with pytest.raises(UnsafePolicyFile, match="REDUCE|not a class"):
        read_pickled_data(pickle.dumps(_TouchFile("/nonexistent/x")), allowed, "t")


@pytest.mark.parametrize("algo", ["PPO", "A2C", "SAC", "TD3", "DDPG"])
def test_genuine_sb3_zip_loads_safely_and_acts_like_sb3s_load(tmp_path, algo):
    env = gym.make(ENV, obs_type="state", control_mode="joint_pos", max_episode_steps=5)
    kw = {"n_steps": 8, "batch_size": 8} if algo == "PPO" else {"n_steps": 8} if algo == "A2C" else {"buffer_size": 100}
    model = getattr(sb3, algo)("MultiInputPolicy", env, seed=0, device="cpu", **kw)
    path = tmp_path / f"{algo}.zip"
    model.save(str(path))
    info = inspect_sb3_zip(path)
    assert info.algo == algo
    agent = load_agent(str(path))
    ref = getattr(sb3, algo).load(str(path), device="cpu")  # SB3's own (unpickling) loader, for comparison
    assert agent.model.observation_space == ref.observation_space and agent.model.action_space == ref.action_space
    obs, _ = env.reset(seed=0)
    for _ in range(3):
        a = agent(obs)
        np.testing.assert_array_equal(a, ref.predict(obs, deterministic=True)[0])
        obs = env.step(a)[0]
    assert agent.requirements.control_mode == "joint_pos" and agent.requirements.obs_type == "state"
    env.close()


def test_sb3_policy_kwargs_with_classes_read_safely(tmp_path):
    import torch

    env = gym.make(ENV, obs_type="state", control_mode="ee_delta", max_episode_steps=5)
    model = sb3.PPO(
        "MultiInputPolicy",
        env,
        n_steps=8,
        batch_size=8,
        device="cpu",
        policy_kwargs=dict(activation_fn=torch.nn.ReLU, net_arch=dict(pi=[16], vf=[16])),
    )
    model.save(str(tmp_path / "p.zip"))
    env.close()
    agent = load_agent(str(tmp_path / "p.zip"))
    assert agent.model.policy.activation_fn is torch.nn.ReLU and agent.model.policy.net_arch == dict(pi=[16], vf=[16])


# ----------------------------------------------------------------------------- ACT folders
def _act_folder(root, pre_steps, config_type="act"):
    """A folder shaped like a LeRobot ACT pretrained_model: the check runs before any of it is read
    by LeRobot, so the weights file's content does not matter here."""
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"type": config_type}))
    (root / "model.safetensors").write_bytes(b"")
    (root / "policy_preprocessor.json").write_text(json.dumps({"name": "policy_preprocessor", "steps": pre_steps}))
    (root / "policy_postprocessor.json").write_text(
        json.dumps(
            {
                "name": "policy_postprocessor",
                "steps": [{"registry_name": "device_processor", "config": {"device": "cpu"}}],
            }
        )
    )
    return root


@pytest.mark.parametrize(
    "step",
    [
        {"class": "subprocess.Popen", "config": {"args": ["touch", "{marker}"]}},
        {"class": "pathlib.Path.touch", "config": {"self": "{marker}"}},
        {"registry_name": "tokenizer_processor", "config": {"tokenizer_name": "{marker}"}},  # registered, not ACT's
    ],
)
def test_crafted_act_folder_runs_no_code(tmp_path, step, capsys):
    marker = tmp_path / "pwned"
    step = json.loads(json.dumps(step).replace("{marker}", str(marker)))
    folder = _act_folder(tmp_path / "act", [{"registry_name": "to_batch_processor", "config": {}}, step])
    with pytest.raises(UnsafePolicyFile) as e:
        load_agent(str(folder))
    msg = str(e.value)
    named = step.get("class", step.get("registry_name"))
    assert "policy_preprocessor.json" in msg and "step 1" in msg and repr(named) in msg
    assert all(name in msg for name in ACT_PROCESSOR_STEPS) and "--trust-policy-file" in msg
    assert not marker.exists()
    assert main(["eval", "--policy", str(folder), "--env", ENV, "--episodes", "1"]) == 2
    assert "policy_preprocessor.json" in capsys.readouterr().err and not marker.exists()


def test_act_folder_of_another_policy_type_refused(tmp_path):
    folder = _act_folder(tmp_path / "p", [], config_type="diffusion")
    with pytest.raises(UnsafePolicyFile, match=r"config.json.*'diffusion' is not 'act'"):
        load_agent(str(folder))


# ----------------------------------------------------------------------------- trained settings
@pytest.fixture(scope="module")
def pixel_ppo(tmp_path_factory):
    """A PPO pixel policy (cam_high at 48x64 + joints, ee_delta), trained a handful of steps."""
    env = gym.make(
        ENV,
        obs_type="pixels_state",
        cameras=("cam_high",),
        image_size=(48, 64),
        control_mode="ee_delta",
        max_episode_steps=8,
    )
    model = sb3.PPO("MultiInputPolicy", env, n_steps=8, batch_size=8, n_epochs=1, seed=0, device="cpu")
    model.learn(total_timesteps=8)
    folder = tmp_path_factory.mktemp("pix")
    zip_path = save_sb3(model, folder / "ppo_pix")
    env.close()
    return zip_path


def test_save_sb3_writes_sidecar(pixel_ppo):
    meta = json.loads(pixel_ppo.with_suffix(".env.json").read_text())
    assert pixel_ppo.name == "ppo_pix.zip" and meta["algo"] == "PPO" and meta["env_id"] == ENV
    assert (meta["obs_type"], meta["cameras"], meta["image_size"], meta["control_mode"]) == (
        "pixels_state",
        ["cam_high"],
        [48, 64],
        "ee_delta",
    )


def test_sb3_pixel_policy_evaluates_at_its_training_size(pixel_ppo, tmp_path):
    r = evaluate_policy(str(pixel_ppo), ENV, episodes=1, progress=False, max_episode_steps=6)
    assert r.episodes == 1 and r.per_episode[0].length == 6
    # without the sidecar: derived from the zip's stored spaces
    bare = tmp_path / "bare.zip"
    shutil.copy(pixel_ppo, bare)
    agent = load_agent(str(bare))
    req = agent.requirements
    assert (req.obs_type, req.cameras, req.image_size, req.control_mode) == (
        "pixels_state",
        ("cam_high",),
        (48, 64),
        "ee_delta",
    )
    # overrides: render at 96x128 (resized to the model's 48x64), an extra camera, joint_delta
    r = evaluate_policy(
        str(bare),
        ENV,
        episodes=1,
        progress=False,
        max_episode_steps=3,
        image_size=(96, 128),
        cameras=("cam_high", "cam_left_wrist"),
        control_mode="joint_delta",
    )
    assert r.per_episode[0].length == 3
    with pytest.raises(ValueError, match="lacks \\['cam_high'\\]"):
        load_agent(str(bare), cameras=("cam_left_wrist",))


def test_sb3_pixel_policy_via_cli_main(pixel_ppo, tmp_path):
    """`embodied-gym eval --policy ppo_pix.zip`: one full (200-step) PickCup episode at 48x64."""
    out = tmp_path / "eval.json"
    assert main(["eval", "--policy", str(pixel_ppo), "--env", ENV, "--episodes", "1", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["episodes"] == 1 and len(result["lengths"]) == 1 and result["lengths"][0] > 0
