"""PhysAligner: parameter space, the three stages, the baselines, the calibrate CLI and its report."""

import re

import gymnasium as gym
import numpy as np
import pytest
import torch

import embodied_gym
from embodied_gym.data.recording import record
from embodied_gym.data.replay import load_episodes
from embodied_gym.physaligner import ParameterSpace
from embodied_gym.physaligner.space import parameter_names
from embodied_gym.physaligner.surrogate import Surrogate, SurrogateTrainConfig, train_surrogate
from embodied_gym.physaligner.transitions import OneStepSimulator, episode_transitions, simulate_transitions

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
    assert space.dim == 51
    u = space.sample(16, seed=1)
    np.testing.assert_allclose(space.normalise(space.denormalise(u)), u, atol=1e-12)
    p = {q.name: q for q in space.params}
    assert p["kp.left_waist"].log and not p["frictionloss.left_elbow"].log
    assert space.to_physics(space.values_of(space.base)) == space.base


def test_frozen_parameters_keep_their_base_value():
    space = ParameterSpace(frozen=only(RIGHT_KP))
    assert space.names == RIGHT_KP
    phys = space.to_physics(np.full(6, 99.0))
    assert phys.kp[6:] == (99.0,) * 6 and phys.kp[:6] == space.base.kp[:6]


@pytest.mark.parametrize("kwargs,match", [
    (dict(bounds={"kp.left_waist": (10, 5)}), "kp.left_waist"),
    (dict(frozen=["kp.left_wrist"]), "kp.left_wrist"),
    (dict(bounds={"pad_friction": (-1, 1)}), "negative"),
])
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


def test_transitions_depend_on_theta_and_are_cached(episodes, tmp_path):
    space = ParameterSpace(frozen=only(RIGHT_KP))
    t = simulate_transitions(episodes, "PickCup", space, 4, workers=1, cache_dir=tmp_path, progress=False)
    assert t.next_state.shape == (4, len(t.state), 28)
    assert np.abs(t.next_state[0] - t.next_state[1]).max() > 1e-4
    assert len(list(tmp_path.glob("transitions-*.npz"))) == 1
    again = simulate_transitions(episodes, "PickCup", space, 4, workers=1, cache_dir=tmp_path, progress=False)
    np.testing.assert_array_equal(again.next_state, t.next_state)


def test_surrogate_learns_and_round_trips(episodes, tmp_path):
    space = ParameterSpace(frozen=only(RIGHT_KP))
    t = simulate_transitions(episodes, "PickCup", space, 8, workers=1, progress=False)
    model, log = train_surrogate(t, train=SurrogateTrainConfig(epochs=8, batch_size=256), progress=False)
    assert log["train_mse"][-1] < 0.5 * log["train_mse"][0]
    model.save_pretrained(tmp_path / "sur")
    loaded = Surrogate.from_pretrained(tmp_path / "sur")
    theta = torch.rand(3, space.dim)
    s = torch.as_tensor(t.state[:3], dtype=torch.float32)
    a = torch.as_tensor(t.action[:3], dtype=torch.float32)
    assert torch.equal(model(theta, s, a), loaded(theta, s, a))
    # θ is differentiable through the surrogate (what stage 3 needs).
    theta.requires_grad_(True)
    loaded(theta, s, a).sum().backward()
    assert theta.grad is not None and torch.isfinite(theta.grad).all()


def test_differentiable_fk_matches_mujoco():
    import mujoco

    from embodied_gym import PhysicsParams
    from embodied_gym.sim import robot
    from embodied_gym.sim.scene import compile_scene
    from embodied_gym.sim.tasks import make_task
    from embodied_gym.physaligner.fk import ArmFK

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


def test_refinement_recovers_known_parameters(tmp_path):
    """Sim-generated data (no unmodelled effects), two free gains, true values far from nominal."""
    from embodied_gym.physaligner.fk import ArmFK
    from embodied_gym.physaligner.refine import RefineConfig, refine

    free = ["kp.right_shoulder", "kp.right_elbow"]
    space = ParameterSpace(frozen=only(free))
    nominal = space.values_of(space.base)
    truth = nominal * np.array([1.6, 0.6])
    env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state", physics=space.to_physics(truth),
                   max_episode_steps=100)
    record(env, embodied_gym.make_expert(env), tmp_path / "d", 3, seed=10, progress=False)
    env.close()
    eps = load_episodes(tmp_path / "d")
    t = simulate_transitions(eps, "PickCup", space, 32, workers=1, progress=False)
    model, _ = train_surrogate(t, train=SurrogateTrainConfig(epochs=40, batch_size=512), progress=False)
    s, a, s_next, _ = episode_transitions(eps)
    sim = OneStepSimulator("PickCup", space)
    found = refine(model, ArmFK(sim.model, sim.idx), space, s, a, s_next, RefineConfig(restarts=3, steps=300)).values
    rel = np.abs(found - truth) / truth
    assert (rel < 0.2).all(), (found, truth)
    assert (np.abs(found - truth) < np.abs(nominal - truth)).all()


@pytest.fixture(scope="module")
def shifted_gains(tmp_path_factory):
    """One sim episode under right-arm gains far from nominal, and a 2-parameter space."""
    free = ["kp.right_shoulder", "kp.right_elbow"]
    space = ParameterSpace(frozen=only(free))
    truth = space.values_of(space.base) * np.array([1.6, 0.6])
    root = tmp_path_factory.mktemp("sa") / "d"
    env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state", physics=space.to_physics(truth),
                   max_episode_steps=60)
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
    env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state", physics=space.to_physics(truth),
                   max_episode_steps=40)
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
    args = ["calibrate", "--dataset", str(root), "--method", method, "--out", str(out), "--free",
            "kp.right_shoulder", "kp.right_elbow", "--samples", "8", "--epochs", "3", "--sa-steps", "4",
            "--budget", "3", "--workers", "1", "--restarts", "2", "--refine-steps", "20", "--sysid-iterations", "2"]
    assert main(args) == 0
    result = json.loads(out.read_text())
    assert result["method"] == method and set(result["calibrated"]) == {"kp.right_shoulder", "kp.right_elbow"}
    assert result["dataset"]["held_out_episodes"] and result["wall_time_s"]["total"] > 0
    sim = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state", physics=str(out))
    got = sim.unwrapped.physics.kp[6 + 1:6 + 3]
    np.testing.assert_allclose(got, [result["calibrated"]["kp.right_shoulder"], result["calibrated"]["kp.right_elbow"]])
    report = (tmp_path / "result.report.md").read_text()
    assert "| kp.right_shoulder |" in report and "Held-out open-loop replay error" in report
    for png in ("paths", "loss", "error_vs_time"):
        assert (tmp_path / f"result.{png}.png").stat().st_size > 10_000
    if method == "physaligner":  # a rerun resumes from the cached stage-1 dataset and surrogate
        work = tmp_path / "result.json.work"
        assert list(work.glob("transitions-*.npz")) and list(work.glob("surrogate-*/surrogate.safetensors"))
        assert main(args) == 0


def test_stage1_on_ray_matches_processes(episodes, tmp_path):
    pytest.importorskip("ray")
    space = ParameterSpace(frozen=only(["kp.right_elbow"]))
    local = simulate_transitions(episodes[:1], "PickCup", space, 2, workers=1, progress=False)
    on_ray = simulate_transitions(episodes[:1], "PickCup", space, 2, workers=1, progress=False, backend="ray")
    np.testing.assert_allclose(on_ray.next_state, local.next_state)
    with pytest.raises(ValueError, match="backend"):
        simulate_transitions(episodes[:1], "PickCup", space, 2, backend="dask")


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
        for t in range(n):
            frame = {k: np.zeros(v["shape"], dtype=np.float32 if v["dtype"] == "float32" else bool)
                     for k, v in feats.items()}
            if e == nan_in:
                frame["observation.state"][3] = np.nan
            ds.add_frame({**frame, "task": "pick"})
        ds.save_episode()
    ds.finalize()
    return root


@pytest.mark.parametrize("kind,match", [("nan", "episode 1 .*NaN"), ("short", "episode 1 .*1 frame"),
                                        ("missing", "observation.ee_pose")])
def test_calibrate_bad_datasets_name_the_episode(tmp_path, kind, match, capsys):
    from embodied_gym.cli import main

    lengths = [3, 1 if kind == "short" else 3, 3]
    root = _handmade_dataset(tmp_path / "d", lengths, nan_in=1 if kind == "nan" else None,
                             drop="observation.ee_pose" if kind == "missing" else None)
    assert main(["calibrate", "--dataset", str(root), "--task", "PickCup", "--out", str(tmp_path / "r.json")]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # (datasets' progress bars come before it)
    assert last.startswith("embodied-gym calibrate: error: ") and re.search(match, last)


def test_refinement_windows_stay_inside_episodes():
    from embodied_gym.physaligner.refine import windows

    episode = np.array([0] * 5 + [1] * 3)
    w = windows(episode, 3)
    assert w.tolist() == [[0, 1, 2], [1, 2, 3], [2, 3, 4], [5, 6, 7]]
    assert (episode[w] == episode[w[:, :1]]).all()
    assert len(windows(episode, 6)) == 0
