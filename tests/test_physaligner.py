"""PhysAligner: parameter space, the three stages, the trust region, the baselines, the calibrate CLI and its report."""

import re

import gymnasium as gym
import numpy as np
import pytest
import torch

import embodied_gym
from embodied_gym.data.replay import load_episodes
from embodied_gym.physaligner import ParameterSpace
from embodied_gym.physaligner.space import parameter_names
from embodied_gym.physaligner.surrogate import SurrogateTrainConfig, train_on_rows
from embodied_gym.physaligner.transitions import OneStepSimulator, episode_transitions, simulate_dense
from embodied_gym.recording import record

RIGHT_KP = [n for n in parameter_names() if n.startswith("kp.right")]


def only(names):
    return [n for n in parameter_names() if n not in names]


@pytest.fixture(scope="module")
def episodes(tmp_path_factory):
    root = tmp_path_factory.mktemp("pa") / "pickcup"
    env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state", max_episode_steps=40)
    record(env, embodied_gym.make_expert(env), root, 2, progress=False)
    env.close()
    return load_episodes(root)


def test_space_scaling_round_trip_and_log_scale():
    space = ParameterSpace()
    assert space.dim == 64  # 4 x 12 per-joint physics, 12 backlash, 4 scalars (object_mass_scale among them)
    assert "object_mass_scale" in space.names and "backlash.right_wrist_rotate" in space.names
    u = space.sample(16, seed=1)
    np.testing.assert_allclose(space.normalise(space.denormalise(u)), u, atol=1e-12)
    p = {q.name: q for q in space.params}
    assert p["kp.left_waist"].log and not p["backlash.left_elbow"].log
    assert (p["kp.left_waist"].low, p["kp.left_waist"].high) == (43.0 * 0.5, 43.0 * 2.0)  # 0.5x-2x boxes
    np.testing.assert_allclose(space.normalise(space.values_of(space.base))[0], 0.5)  # nominal in the middle
    assert space.to_physics(space.values_of(space.base)) == space.base


def test_frozen_parameters_keep_their_base_value():
    space = ParameterSpace(frozen=only(RIGHT_KP))
    assert space.names == RIGHT_KP
    phys = space.to_physics(np.full(6, 99.0))
    assert phys.kp[6:] == (99.0,) * 6 and phys.kp[:6] == space.base.kp[:6]


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(bounds={"kp.left_waist": (10, 5)}), "kp.left_waist"),
        (dict(frozen=["kp.left_wrist"]), "kp.left_wrist"),
        (dict(bounds={"pad_friction": (-1, 1)}), "negative"),
    ],
)
def test_bad_bounds_and_names_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ParameterSpace(**kwargs)


def test_one_step_simulator_reproduces_a_sim_recording(episodes):
    space = ParameterSpace()
    sim = OneStepSimulator("PickCup", space)
    sim.set_theta(space.normalise(space.values_of(space.base)))
    s, a, s_next, _ = episode_transitions(episodes[:1])
    sim.place(episodes[0].layout)
    pred = np.array([sim.step(s[i], a[i]) for i in range(len(s))])
    assert np.abs(pred[:, :14] - s_next[:, :14]).max() < 1e-3


def test_dense_transitions_depend_on_theta_and_the_surrogate_learns_them(episodes):
    space = ParameterSpace(frozen=only(RIGHT_KP))
    sim = OneStepSimulator("PickCup", space)
    s, a, _, ep = episode_transitions(episodes)
    rows = np.arange(len(s))
    layouts = {e.index: e.layout for e in episodes}
    low, _ = simulate_dense(sim, np.full(space.dim, 0.1), s, a, ep, rows, layouts)
    high, _ = simulate_dense(sim, np.full(space.dim, 0.9), s, a, ep, rows, layouts)
    assert np.abs(low - high).max() > 1e-4
    rep = np.repeat(rows, 8)  # eight θ per transition, in episode order
    theta = np.random.default_rng(0).uniform(0, 1, (len(rep), space.dim))
    next_state, applied = simulate_dense(sim, theta, s, a, ep, rep, layouts)
    train = SurrogateTrainConfig(epochs=8, batch_size=256)
    model, log = train_on_rows(theta, s[rep], applied, next_state, train=train, groups=rep)
    assert log["train_mse"][-1] < 0.5 * log["train_mse"][0]
    # θ is differentiable through the surrogate (what stage 3 needs).
    th = torch.as_tensor(theta[:3], dtype=torch.float32).requires_grad_(True)
    model(
        th, torch.as_tensor(s[:3], dtype=torch.float32), torch.as_tensor(applied[:3], dtype=torch.float32)
    ).sum().backward()
    assert th.grad is not None and torch.isfinite(th.grad).all()


def test_differentiable_fk_matches_mujoco():
    import mujoco

    from embodied_gym import PhysicsParams
    from embodied_gym.physaligner.fk import ArmFK
    from embodied_gym.sim import robot
    from embodied_gym.sim.scene import compile_scene
    from embodied_gym.sim.tasks import make_task

    model, idx, _ = compile_scene(make_task("PickCup"), PhysicsParams())
    data = mujoco.MjData(model)
    fk = ArmFK(model, idx)
    rng = np.random.default_rng(0)
    for _ in range(5):
        q = robot.START_QPOS + rng.uniform(-0.8, 0.8, 14)
        q[robot.GRIPPER_INDICES] = 0.04
        data.qpos[idx.joint_qpos] = q
        mujoco.mj_kinematics(model, data)
        pos, rot = fk(torch.tensor(q))
        np.testing.assert_allclose(pos.numpy(), data.site_xpos[idx.tcp_sites], atol=1e-9)
        np.testing.assert_allclose(rot.numpy(), data.site_xmat[idx.tcp_sites].reshape(2, 3, 3), atol=1e-9)


@pytest.fixture(scope="module")
def shifted_gains(tmp_path_factory):
    """One sim episode under right-arm gains far from nominal, and a 2-parameter space."""
    free = ["kp.right_shoulder", "kp.right_elbow"]
    space = ParameterSpace(frozen=only(free))
    truth = space.values_of(space.base) * np.array([1.6, 0.6])
    root = tmp_path_factory.mktemp("sa") / "d"
    env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state", physics=space.to_physics(truth), max_episode_steps=60)
    record(env, embodied_gym.make_expert(env), root, 1, seed=4, progress=False)
    env.close()
    return space, truth, load_episodes(root)


def test_replay_objective_is_zero_at_the_truth(shifted_gains):
    from embodied_gym.physaligner.objective import ReplayObjective

    space, truth, eps = shifted_gains
    obj = ReplayObjective(eps, "PickCup", space)
    assert obj(space.normalise(truth)) < 1e-4
    assert obj(space.normalise(space.values_of(space.base))) > 1e-2
    obj.close()


@pytest.mark.parametrize("method", ["sa", "cmaes", "sysid"])
def test_baselines_improve_on_nominal(shifted_gains, method):
    from embodied_gym.physaligner.baselines import cma_es, mujoco_sysid, simulated_annealing
    from embodied_gym.physaligner.objective import ReplayObjective

    space, truth, eps = shifted_gains
    obj = ReplayObjective(eps, "PickCup", space)
    start = space.normalise(space.values_of(space.base))
    nominal = obj(start)
    if method == "sa":
        res = simulated_annealing(obj, start, steps=30, seed=0)
    elif method == "cmaes":
        res = cma_es(obj, start, max_evaluations=40, seed=0)
    else:  # Gauss-Newton on the least-squares form of the same replay; its value is ‖r‖², so re-score
        res = mujoco_sysid(obj.residuals, start, space.names, max_iterations=5)
        np.testing.assert_allclose(space.denormalise(res.theta), truth, rtol=0.02)
        res.value = obj(res.theta)
    assert res.value < 0.5 * nominal
    assert [h[2] for h in res.history] == sorted((h[2] for h in res.history), reverse=True)  # best never worsens
    budget = simulated_annealing(obj, start, steps=10_000, budget_s=0.5)
    assert budget.evaluations < 10_000
    obj.close()


@pytest.fixture(scope="module")
def shifted_dataset(shifted_gains, tmp_path_factory):
    space, truth, _ = shifted_gains
    root = tmp_path_factory.mktemp("cli") / "data"
    env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state", physics=space.to_physics(truth), max_episode_steps=40)
    record(env, embodied_gym.make_expert(env), root, 2, progress=False, env_id="EmbodieDreamer-PickCup-v0")
    env.close()
    return root


@pytest.mark.parametrize("method", ["physaligner", "sa", "cmaes", "sysid"])
def test_calibrate_cli_end_to_end_and_result_loads(shifted_gains, shifted_dataset, tmp_path, method):
    import json

    from embodied_gym.cli import main

    space, truth, eps = shifted_gains
    root = shifted_dataset
    out = tmp_path / "result.json"
    args = [
        "calibrate",
        "--dataset",
        str(root),
        "--method",
        method,
        "--out",
        str(out),
        "--free",
        "kp.right_shoulder",
        "kp.right_elbow",
        "--epochs",
        "3",
        "--sa-steps",
        "4",
        "--budget",
        "3",
        "--refine-steps",
        "20",
        "--sysid-iterations",
        "2",
    ]
    assert main(args) == 0
    result = json.loads(out.read_text())
    assert result["method"] == method and set(result["calibrated"]) == {"kp.right_shoulder", "kp.right_elbow"}
    assert result["dataset"]["held_out_episodes"] and result["wall_time_s"]["total"] > 0
    sim = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state", physics=str(out))
    got = sim.unwrapped.physics.kp[6 + 1 : 6 + 3]
    np.testing.assert_allclose(got, [result["calibrated"]["kp.right_shoulder"], result["calibrated"]["kp.right_elbow"]])
    report = (tmp_path / "result.report.md").read_text()
    assert "| kp.right_shoulder |" in report and "Held-out open-loop replay error" in report
    for png in ("paths", "loss", "error_vs_time"):
        assert (tmp_path / f"result.{png}.png").stat().st_size > 10_000
    assert result["acceptance"]["message"] and result["latency_steps"]["calibrated"] == 0  # a sim recording: no delay
    if method == "physaligner":  # a rerun resumes from the trust region's checkpoint
        work = tmp_path / "result.json.work"
        assert list(work.glob("trust-region-*.json"))
        assert main(args) == 0


@pytest.mark.parametrize("setting", ["samples", "restarts", "horizon", "workers", "backend", "ray_address"])
def test_removed_calibration_settings_are_named_as_unknown(setting, tmp_path, capsys):
    """The classic stage-1 settings the trust region never read are gone; naming one is a clear error."""
    import yaml

    from embodied_gym.cli import main

    flag = "--" + setting.replace("_", "-")
    with pytest.raises(SystemExit):
        main(["calibrate", "--dataset", "D", "--out", str(tmp_path / "r.json"), flag, "1"])
    assert f"unrecognized arguments: {flag}" in capsys.readouterr().err
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({setting: 1}))
    args = [
        "calibrate",
        "--dataset",
        "D",
        "--task",
        "PickCup",
        "--out",
        str(tmp_path / "r.json"),
        "--config",
        str(config),
    ]
    assert main(args) == 2
    assert f"unknown setting {setting!r}" in capsys.readouterr().err


def test_demo_profiles_name_only_calibration_settings_that_exist():
    import dataclasses
    from pathlib import Path

    import yaml

    from embodied_gym.demo.configuration import CalibrateStageConfig

    known = {f.name for f in dataclasses.fields(CalibrateStageConfig)}
    profiles = sorted((Path(embodied_gym.__file__).parent / "demo" / "profiles").glob("*.yaml"))
    assert profiles
    for path in profiles:
        calibrate = (yaml.safe_load(path.read_text()) or {}).get("calibrate") or {}
        assert set(calibrate) <= known, (path.name, set(calibrate) - known)


def test_unconstrained_parameters_are_named():
    from embodied_gym.physaligner.calibrate import unconstrained

    assert unconstrained(["a", "b"], np.array([10.0, 1e-6]), loss=1.0) == ["b"]
    assert unconstrained(["a"], None, None) is None


def _handmade_dataset(root, lengths, nan_in=None, drop=None):
    """A LeRobotDataset written frame by frame, to feed calibration bad input."""
    from lerobot.datasets import LeRobotDataset

    from embodied_gym.data.features import FPS, dataset_features

    feats = {k: v for k, v in dataset_features((), (0, 0)).items() if k != drop}
    ds = LeRobotDataset.create("t/bad", fps=FPS, features=feats, root=root, use_videos=False)
    for e, n in enumerate(lengths):
        for _t in range(n):
            frame = {
                k: np.zeros(v["shape"], dtype=np.float32 if v["dtype"] == "float32" else bool) for k, v in feats.items()
            }
            if e == nan_in:
                frame["observation.state"][3] = np.nan
            ds.add_frame({**frame, "task": "pick"})
        ds.save_episode()
    ds.finalize()
    return root


@pytest.mark.parametrize(
    "kind,match", [("nan", "episode 1 .*NaN"), ("short", "episode 1 .*1 frame"), ("missing", "observation.ee_pose")]
)
def test_calibrate_bad_datasets_name_the_episode(tmp_path, kind, match, capsys):
    from embodied_gym.cli import main

    lengths = [3, 1 if kind == "short" else 3, 3]
    root = _handmade_dataset(
        tmp_path / "d",
        lengths,
        nan_in=1 if kind == "nan" else None,
        drop="observation.ee_pose" if kind == "missing" else None,
    )
    assert main(["calibrate", "--dataset", str(root), "--task", "PickCup", "--out", str(tmp_path / "r.json")]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # (datasets' progress bars come before it)
    assert last.startswith("embodied-gym calibrate: error: ") and re.search(match, last)


# ------------------------------------------------------------------ latency, backlash, the guard, the trust region
DELAYED_FREE = ["kp.right_shoulder", "kp.right_elbow", "backlash.right_elbow"]


@pytest.fixture(scope="module")
def delayed(tmp_path_factory):
    """Sim recordings under one step of delay, 0.01 rad of right-elbow backlash and shifted right-arm gains."""
    import dataclasses

    space = ParameterSpace(frozen=only(DELAYED_FREE))
    truth = space.values_of(space.base) * np.array([1.4, 0.7, 0.0]) + np.array([0.0, 0.0, 0.01])
    physics = dataclasses.replace(space.to_physics(truth), latency_steps=1)
    root = tmp_path_factory.mktemp("delayed") / "d"
    env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state", physics=physics, max_episode_steps=50)
    record(env, embodied_gym.make_expert(env), root, 4, seed=3, progress=False, env_id="EmbodieDreamer-PickCup-v0")
    env.close()
    return space, truth, root


def test_one_step_simulator_applies_the_action_history_through_the_effects(delayed):
    """At the true physics (delay and backlash included) the one-step simulator reproduces the recording
    far better with the applied targets than with the raw commands."""
    import dataclasses

    from embodied_gym.physaligner.transitions import applied_actions
    from embodied_gym.sim.core import effects_from_physics

    space, truth, root = delayed
    eps = load_episodes(root)
    sim = OneStepSimulator("PickCup", space.with_base(dataclasses.replace(space.base, latency_steps=1)))
    s, a, s_next, ep = episode_transitions(eps)
    u = sim.space.normalise(truth)
    sim.set_theta(u)
    layouts = {e.index: e.layout for e in eps}

    def error(actions):
        out, current = [], None
        for i in range(len(s)):
            if ep[i] != current:
                current = ep[i]
                sim.place(layouts[int(current)])
            out.append(sim.step(s[i], actions[i]))
        return np.abs(np.array(out)[:, 14:] - s_next[:, 14:]).mean()

    eff = effects_from_physics(sim.physics_of(u))
    through_effects, raw = error(applied_actions(s, a, ep, eff.latency_steps, eff.backlash)), error(a)
    assert through_effects < 0.2 * raw, (through_effects, raw)


def test_calibration_recovers_a_known_delay_and_backlash(delayed, tmp_path):
    from embodied_gym.physaligner.calibrate import CalibrationConfig, calibrate

    space, truth, root = delayed
    free = ["kp.right_elbow", "backlash.right_elbow"]
    small = ParameterSpace(space.base.__class__.from_dict({"kp": {"right_shoulder": truth[0]}}), frozen=only(free))
    r = calibrate(
        root,
        "PickCup",
        tmp_path / "r.json",
        small,
        CalibrationConfig(method="sysid", sysid_iterations=6, held_out=0.25, budget_s=60),
        progress=False,
        report=False,
    )
    assert r["latency_steps"]["calibrated"] == 1 and r["values"]["latency_steps"] == 1
    assert r["acceptance"]["improved"]
    assert r["calibrated"]["kp.right_elbow"] == pytest.approx(truth[1], rel=0.05)
    assert r["calibrated"]["backlash.right_elbow"] == pytest.approx(0.01, abs=0.002)
    b, a = r["held_out_errors"]["before"], r["held_out_errors"]["after"]
    assert a["translation_error_m"] < 0.2 * b["translation_error_m"]


def test_acceptance_guard_keeps_the_start_and_says_so(tmp_path, capsys):
    """Recordings of the nominal sim: nothing can beat the start, and the result says so."""
    import json

    from embodied_gym.cli import main

    root = tmp_path / "nominal"
    env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state", max_episode_steps=30)
    record(env, embodied_gym.make_expert(env), root, 3, seed=20, progress=False, env_id="EmbodieDreamer-PickCup-v0")
    env.close()
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "calibrate",
                "--dataset",
                str(root),
                "--method",
                "sa",
                "--out",
                str(out),
                "--free",
                "kp.right_elbow",
                "damping.right_elbow",
                "--sa-steps",
                "4",
                "--held-out",
                "0.34",
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    assert result["acceptance"]["improved"] is False
    assert "found nothing better than the starting physics" in capsys.readouterr().out
    assert embodied_gym.PhysicsParams.from_dict(result["values"]) == embodied_gym.PhysicsParams()
    after, before = result["held_out_errors"]["after"], result["held_out_errors"]["before"]
    assert after == before


def test_trust_region_physaligner_beats_nominal(delayed, tmp_path):
    from embodied_gym.physaligner.calibrate import CalibrationConfig, calibrate

    space, truth, root = delayed
    r = calibrate(
        root,
        "PickCup",
        tmp_path / "r.json",
        space,
        CalibrationConfig(
            method="physaligner",
            held_out=0.25,
            tr_transitions=150,
            surrogate_epochs=15,
            refine_steps=60,
            tr_iterations=4,
            budget_s=60,
        ),
        progress=False,
        report=False,
    )
    b, a = r["held_out_errors"]["before"], r["held_out_errors"]["after"]
    assert r["acceptance"]["improved"] and r["logs"]["accepted_steps"] >= 1
    assert a["translation_error_m"] < 0.5 * b["translation_error_m"]
    assert r["latency_steps"]["calibrated"] == 1
    found = np.array([r["calibrated"][n] for n in DELAYED_FREE])
    nominal = space.values_of(space.base)
    assert np.abs(found - truth)[:2].sum() < np.abs(nominal - truth)[:2].sum()  # gains moved towards the truth
    # Every iteration's step was checked by the real simulator; only decreases were accepted.
    for it in r["logs"]["iterations"]:
        assert it["accepted"] == (it["real_loss_step"] < it["real_loss_centre"])


def test_default_free_set_is_the_joints_the_recording_moves(episodes):
    from embodied_gym.physaligner.space import default_free

    free = default_free(episodes)
    assert free and all(n.split(".")[0] in ("kp", "damping", "frictionloss", "backlash") for n in free)
    moved = {n.split(".")[1] for n in free}
    span = np.ptp(np.concatenate([e.state for e in episodes]), axis=0)
    from embodied_gym.sim import robot
    from embodied_gym.sim.physics import ARM_JOINT_NAMES

    for j in ARM_JOINT_NAMES:
        assert (j in moved) == (span[robot.ARM_INDICES[ARM_JOINT_NAMES.index(j)]] >= 0.05)
