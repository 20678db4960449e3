"""`embodied-gym demo`: the whole loop on the smoke profile, its artefacts, its cache and its config errors."""

import json
import re
import shutil

import numpy as np
import pytest

from embodied_gym.demo.cache import StageCache
from embodied_gym.demo.configuration import load_config
from embodied_gym.demo.stages import STAGE_NAMES, STAGES

#: the smoke run also trains the RL baseline (the smoke profile alone evaluates what the quick profile does)
WITH_RESIDUAL = ["--evaluate.policies", "expert", "act_stand_in", "act_aligned", "tpo", "residual"]


def smoke_demo(runs, name: str, *extra: str) -> int:
    """``demo --profile smoke`` into RUNS/NAME, the RL baseline included."""
    from embodied_gym.cli import main

    return main(["demo", "--profile", "smoke", "--runs", str(runs), "--name", name, *WITH_RESIDUAL, *extra])


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("demo")
    assert smoke_demo(run, "s") == 0
    return run / "s"


def test_demo_writes_every_artefact_and_names_every_stage(smoke_run):
    summary = json.loads((smoke_run / "summary.json").read_text())
    stages = summary["tasks"]["PickCup"]["stages"]
    assert list(stages) == list(STAGE_NAMES)
    assert stages["act_nominal"]["outputs"] == {"skipped": "nominal_sim: false"}
    report = (smoke_run / "report.html").read_text()
    for stage in stages:
        assert f"<td>{stage}</td>" in report
        assert (smoke_run / stage / "stage.json").exists()
    assert "stand-in" in report and "data:image/png;base64," in report
    evaluation = summary["tasks"]["PickCup"]["evaluation"]
    assert set(evaluation) == {"expert", "act_stand_in", "act_aligned", "tpo", "residual"}
    for e in evaluation.values():
        assert 0.0 <= e["ci95"][0] <= e["success_rate"] <= e["ci95"][1] <= 1.0
    # the learnt policies read the estimate, whose reset-frame error the report shows; the expert reads the truth
    assert evaluation["expert"].get("mean_reset_pose_error_cm") is None
    learnt = ("act_stand_in", "act_aligned", "tpo", "residual")
    assert all(evaluation[n]["mean_reset_pose_error_cm"] > 0 for n in learnt)
    assert "reset-frame estimate off by" in report
    assert (smoke_run / "calibrate" / "result.json").exists()
    # the pose-estimate path: a perception model, policies that read its estimate, VisAligner skipped
    assert (smoke_run / "perception" / "train" / "model" / "model.safetensors").exists()
    assert stages["visaligner"]["outputs"]["skipped"]
    # 40-step episodes never succeed: no grasp to measure the camera's bias on, so it is left uncorrected
    assert "successful demonstrations" in stages["perception_offset"]["outputs"]["skipped"]
    assert "was not corrected" in report
    from embodied_gym.policies.act import latest_checkpoint

    ckpt = latest_checkpoint(smoke_run / "act_aligned" / "policy")
    meta = json.loads((ckpt / "pretrained_model" / "embodied_gym_policy.json").read_text())
    assert meta["env_state"] and meta["camera_fps"] == 10 and meta["pose_estimator"]["path"].endswith("model")
    # the aligned-sim demos hold the sim's true poses (sim_pose_source), the stand-in demos the estimate
    assert meta["pose_estimator"]["values"] == "ground_truth"
    real_meta = json.loads(
        (
            latest_checkpoint(smoke_run / "act_stand_in" / "policy") / "pretrained_model" / "embodied_gym_policy.json"
        ).read_text()
    )
    assert "values" not in real_meta["pose_estimator"]
    # both were recorded holding the reset frame's poses (the loop's pose_update), as they are evaluated
    assert meta["pose_estimator"]["update"] == real_meta["pose_estimator"]["update"] == "at_reset"
    paired = summary["tasks"]["PickCup"]["paired"]
    assert [(c["a"], c["b"]) for c in paired] == [("act_aligned", "act_stand_in"), ("tpo", "act_aligned")]
    assert all(c["n"] == 1 and 0 < c["p_value"] <= 1 for c in paired)
    assert "exact McNemar" in report
    # TPO's stage evaluated the aligned-sim policy and its iteration in the sim, and says which it returned
    tpo_log = stages["tpo"]["outputs"]["log"]
    assert [r["iteration"] for r in tpo_log] == [0, 1] and all("eval_success_rate" in r for r in tpo_log)
    assert "TPO returned" in report and "greedy success in the calibrated sim" in report
    # the RL baseline: an SB3 residual over the aligned-sim policy, evaluated in the sim against it
    residual = stages["residual"]["outputs"]
    assert (
        set(residual["eval"]) == {"base", "residual"}
        and (smoke_run / "residual" / "residual" / "residual.zip").exists()
    )
    # act_stand_in trained in a background process (background_act_stand_in, the default), its output in a log
    assert stages["act_stand_in"]["background"] and not stages["act_aligned"]["background"]
    assert "train act" in (smoke_run / "act_stand_in" / "stage.log").read_text()


def test_second_run_skips_cached_stages_and_from_reruns(smoke_run):
    assert smoke_demo(smoke_run.parent, "s") == 0
    stages = json.loads((smoke_run / "summary.json").read_text())["tasks"]["PickCup"]["stages"]
    assert all(s["cached"] for s in stages.values())
    assert smoke_demo(smoke_run.parent, "s", "--from", "evaluate") == 0
    stages = json.loads((smoke_run / "summary.json").read_text())["tasks"]["PickCup"]["stages"]
    assert [n for n, s in stages.items() if not s["cached"]] == ["evaluate"]

    # a changed setting reruns just its stage; `evaluate.expert: false` takes the expert's bar from
    # its recorded demonstrations (3 in the smoke profile) instead of evaluating it again
    override = smoke_run.parent / "no_expert.yaml"
    override.write_text("evaluate: {expert: false}\n")
    assert smoke_demo(smoke_run.parent, "s", "--config", str(override)) == 0
    summary = json.loads((smoke_run / "summary.json").read_text())["tasks"]["PickCup"]
    assert [n for n, s in summary["stages"].items() if not s["cached"]] == ["evaluate"]
    expert = summary["evaluation"]["expert"]
    recorded = summary["stages"]["record"]["outputs"]["expert_success"]
    assert expert["episodes"] == 3 and expert["source"].startswith("record")
    assert expert["success_rate"] == pytest.approx(recorded) and expert["ci95"][0] <= recorded <= expert["ci95"][1]
    assert "expert (recorded demos)" in (smoke_run / "report.html").read_text()


def test_robot_config_runs_the_loop_against_another_stand_in_world(smoke_run, tmp_path, capsys):
    from embodied_gym.cli import main
    from embodied_gym.data.reader import open_dataset

    world2 = "embodied_gym/robots/stand_in_world2.yaml"
    run = tmp_path / "w2"
    shutil.copytree(smoke_run, run)  # the perception stage stays cached: it never sees the robot
    assert main(["demo", "--profile", "smoke", "--runs", str(tmp_path), "--name", "w2", "--robot-config", world2]) == 0
    stages = json.loads((run / "summary.json").read_text())["tasks"]["PickCup"]["stages"]
    assert stages["perception"]["cached"] and not stages["record"]["cached"] and not stages["evaluate"]["cached"]
    assert json.loads((run / "record" / "stage.json").read_text())["settings"]["robot_config"] == world2
    # the same seeds on another world: other hidden physics, so other joint trajectories
    a, b = open_dataset(smoke_run / "record" / "dataset"), open_dataset(run / "record" / "dataset")
    qa, qb = np.stack(a.table([0])["observation.state"]), np.stack(b.table([0])["observation.state"])
    n = min(len(qa), len(qb))
    assert np.abs(qa[:n] - qb[:n]).max() > 1e-3
    assert (
        main(["demo", "--profile", "smoke", "--runs", str(tmp_path), "--name", "x", "--robot-config", "nope.yaml"]) == 2
    )
    assert "robot_config nope.yaml: no such file" in capsys.readouterr().err


def test_a_stopped_stage_resumes_from_its_checkpoints_and_finished_evaluations(smoke_run, tmp_path, capsys):
    """A copy of the smoke run as if it had been stopped in ACT's training and in the evaluation, one policy's
    evaluation unfinished: the rerun continues both (no new ACT checkpoint: the last one was the final
    step; the finished evaluations read back, the unfinished one run) and runs nothing else."""
    run = tmp_path / "s"
    shutil.copytree(smoke_run, run)
    assert smoke_demo(tmp_path, "s") == 0  # the settings used below (another test may have changed evaluate's)
    for stage in ("act_aligned", "evaluate"):
        done = json.loads((run / stage / "stage.json").read_text())
        (run / stage / "stage.json").unlink()
        (run / stage / "stage.started.json").write_text(json.dumps({"key": done["key"]}))
    (run / "evaluate" / "tpo.json").unlink()
    checkpoints = sorted(p.name for p in (run / "act_aligned" / "policy" / "checkpoints").iterdir())
    capsys.readouterr()
    assert smoke_demo(tmp_path, "s") == 0
    out = capsys.readouterr().err  # the demo's progress lines
    assert "act_aligned: resuming the run a stop left unfinished" in out
    assert "evaluate: resuming the run a stop left unfinished" in out
    assert "act_stand_in on the stand-in robot: evaluated before the stop" in out
    assert "evaluating tpo on the stand-in robot" in out and "evaluating act_stand_in" not in out
    assert sorted(p.name for p in (run / "act_aligned" / "policy" / "checkpoints").iterdir()) == checkpoints
    for stage in ("act_aligned", "evaluate"):
        assert (run / stage / "stage.json").exists() and not (run / stage / "stage.started.json").exists()
    assert (run / "evaluate" / "tpo.json").exists()


def test_only_a_resumable_stage_with_the_same_key_continues_in_its_folder(tmp_path):
    cache = StageCache(tmp_path)
    key = cache.key({"x": 1}, [])

    def stopped(folder):
        (folder / "checkpoint").write_text("step 5")
        raise KeyboardInterrupt

    for resumable in (True, False):
        with pytest.raises(KeyboardInterrupt):
            cache.execute("a", key, {"x": 1}, [], stopped, resumable)
        assert cache.unfinished("a", key) and not cache.unfinished("a", "another key")
        found = cache.execute("a", key, {"x": 1}, [], lambda f: {"kept": (f / "checkpoint").exists()}, resumable)
        assert found.outputs == {"kept": resumable} and not cache.unfinished("a", key)
    with pytest.raises(KeyboardInterrupt):
        cache.execute("b", key, {"x": 1}, [], stopped, True)
    other = cache.key({"x": 2}, [])  # the settings changed since the stop: start clean
    assert cache.execute("b", other, {"x": 2}, [], lambda f: {"kept": (f / "checkpoint").exists()}, True).outputs == {
        "kept": False
    }


def test_cache_key_changes_with_settings_and_inputs(tmp_path):
    cache = StageCache(tmp_path)
    calls = []
    a = cache.run("a", {"x": 1}, [], lambda f: calls.append("a") or {"v": 1})
    cache.run("b", {}, ["a"], lambda f: calls.append("b") or {})
    again = StageCache(tmp_path)
    assert again.run("a", {"x": 1}, [], lambda f: calls.append("a2") or {}).cached
    assert not again.run("a", {"x": 2}, [], lambda f: calls.append("a3") or {}).cached  # settings changed
    assert not again.run("b", {}, ["a"], lambda f: calls.append("b2") or {}).cached  # its input changed
    assert calls == ["a", "b", "a3", "b2"] and a.outputs == {"v": 1}


def test_reused_run_folders_are_read_in_place_and_never_written(tmp_path):
    base = StageCache(tmp_path / "base")
    base.run("a", {"x": 1}, [], lambda f: {"v": 1})
    branch = StageCache(tmp_path / "branch", reuse=[tmp_path / "base"])
    a = branch.run("a", {"x": 1}, [], lambda f: {"v": 2})
    assert a.cached and a.folder == tmp_path / "base" / "a" and a.outputs == {"v": 1}
    b = branch.run("b", {"y": 1}, ["a"], lambda f: {"w": 1})  # reads the reused stage, runs in its own folder
    assert not b.cached and b.folder == tmp_path / "branch" / "b"
    changed = branch.run("a", {"x": 2}, [], lambda f: {"v": 3})  # another key: runs here, base untouched
    assert changed.folder == tmp_path / "branch" / "a"
    assert json.loads((tmp_path / "base" / "a" / "stage.json").read_text())["outputs"] == {"v": 1}
    with pytest.raises(FileNotFoundError, match="no such run folder"):
        StageCache(tmp_path / "c", reuse=[tmp_path / "missing"])


def test_background_stage_runs_through_the_cache_and_a_failure_names_its_log(tmp_path):
    import functools
    import operator

    from embodied_gym.demo.cache import BackgroundStage

    cache = StageCache(tmp_path)
    # dict.fromkeys(["v"], folder) -> {"v": folder}: a picklable stage function for the spawned process
    key = cache.key({"x": 1}, [])
    rec = BackgroundStage(cache, "ok", key, {"x": 1}, [], functools.partial(dict.fromkeys, ["v"])).result()
    assert not rec.cached and rec.outputs == {"v": str(tmp_path / "ok")}
    assert StageCache(tmp_path).lookup("ok", key).cached  # a later run finds it like any stage
    job = BackgroundStage(cache, "bad", key, {}, [], functools.partial(operator.truediv, 1))  # 1 / folder
    with pytest.raises(RuntimeError, match="stage bad failed.*stage.log"):
        job.result()
    assert "TypeError" in (tmp_path / "bad" / "stage.log").read_text()
    assert not (tmp_path / "bad" / "stage.json").exists()


def test_config_errors_name_the_problem(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("act: {stepz: 3}\n")
    with pytest.raises(ValueError, match="stepz"):
        load_config("quick", str(bad))
    with pytest.raises(ValueError, match="profile"):
        load_config("nope")
    bad.write_text("tasks: [Juggle]\n")
    with pytest.raises(ValueError, match="Juggle"):
        load_config("quick", str(bad))
    bad.write_text("observation: telepathy\n")
    with pytest.raises(ValueError, match="telepathy"):
        load_config("quick", str(bad))
    bad.write_text("sim_pose_source: oracle\n")
    with pytest.raises(ValueError, match="sim_pose_source: 'oracle'"):
        load_config("quick", str(bad))
    bad.write_text("evaluate: {pose_update: sometimes}\n")
    with pytest.raises(ValueError, match="evaluate.pose_update: 'sometimes'"):
        load_config("quick", str(bad))
    bad.write_text("perception: {sources: [randomized, photos]}\n")
    with pytest.raises(ValueError, match=r"perception.sources: \['randomized', 'photos'\] must name"):
        load_config("quick", str(bad))
    cfg = load_config("quick")
    assert cfg.tasks == ["PickCup"] and cfg.observation == "pose_estimate" and cfg.evaluate.episodes >= 30
    assert cfg.pose_update == "at_reset" and cfg.evaluate.pose_update is None
    assert cfg.generate.episodes >= 4 * cfg.record.episodes
    assert load_config("smoke_images").observation == "images"


def test_full_profile_is_paper_image_act_at_240x320_on_cuda():
    from embodied_gym.policies.act.configuration import PRESETS
    from embodied_gym.visaligner.configuration import preset

    cfg = load_config("full")
    assert cfg.act.preset == "paper" and cfg.act.images is not False  # end-to-end image ACT, ACT's ALOHA sizes
    h, w = cfg.record.image_size
    assert h >= 240 and w >= 320
    assert cfg.act.image_size is None and PRESETS["paper"].image_size is None  # trains on frames as recorded
    assert preset(cfg.visaligner.preset, **cfg.visaligner.model).image_size == (h, w)  # VisAligner at that size too
    assert cfg.devices() == {
        "act.device": "cuda",
        "visaligner.device": "cuda",
        "generate.device": "cuda",
        "tpo.device": "cuda",
    }
    assert cfg.require_backbone_weights and cfg.act.backbone_weights is None  # the user supplies the file
    assert not load_config("quick").require_backbone_weights and load_config("quick").act.device == "cpu"


def test_full_profile_refuses_to_start_without_fitting_backbone_weights(tmp_path, capsys):
    import torch
    import torchvision
    from safetensors.torch import save_file

    from embodied_gym.cli import main

    def demo(*extra):
        capsys.readouterr()
        rc = main(["demo", "--full", "--runs", str(tmp_path), "--name", "f", *extra])
        return rc, capsys.readouterr().err

    rc, err = demo()
    assert rc == 2 and "--act.backbone-weights FILE" in err and "IMAGENET1K_V1" in err
    rc, err = demo("--act.backbone-weights", str(tmp_path / "nope.safetensors"))
    assert rc == 2 and "nope.safetensors not found" in err
    bad = tmp_path / "bad.safetensors"
    save_file({"conv1.weight": torch.zeros(8, 3, 3, 3)}, str(bad))
    rc, err = demo("--act.backbone-weights", str(bad))
    assert rc == 2 and "does not fit ACT's resnet18 backbone" in err and "conv1.weight" in err
    assert not (tmp_path / "f").exists()  # refused before any stage
    good = tmp_path / "resnet18.safetensors"
    save_file(torchvision.models.resnet18(weights=None).state_dict(), str(good))
    cfg = load_config("full")
    cfg.act.backbone_weights = str(good)
    if torch.cuda.is_available():
        assert cfg.check() == []
    else:
        with pytest.raises(ValueError, match=r"act.device = cuda.*--act.device cpu --visaligner.device cpu"):
            cfg.check()
    for stage in ("act", "visaligner", "generate", "tpo"):
        getattr(cfg, stage).device = "cpu"
    assert cfg.check() == []
    cfg.visaligner.model = {}  # the tiny preset's 64x80 against 240x320 recordings
    assert any("frames are resized" in w for w in cfg.check())


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the no-GPU error")
def test_visaligner_training_on_cuda_without_a_gpu_names_the_fix(tmp_path):
    from embodied_gym.visaligner.training import VisAlignerTrainConfig, train

    with pytest.raises(ValueError, match="torch sees no GPU.*--device cpu"):
        train(VisAlignerTrainConfig(dataset=str(tmp_path / "ds"), out=str(tmp_path / "out"), device="cuda"))


def test_stage_table_runs_each_stage_after_the_stages_it_reads():
    from embodied_gym.demo.configuration import POLICY_STAGES
    from embodied_gym.demo.stages import downstream

    assert len(set(STAGE_NAMES)) == len(STAGE_NAMES)
    for i, stage in enumerate(STAGES):
        assert set(stage.inputs) <= set(STAGE_NAMES[:i]), stage.name
    assert STAGE_NAMES[:3] == ("perception", "record", "act_stand_in") and STAGE_NAMES[-1] == "evaluate"
    assert set(POLICY_STAGES) <= set(next(s for s in STAGES if s.name == "evaluate").inputs)
    # --from reruns a stage and what reads it, not the stages that merely run later
    assert downstream("calibrate") >= {"calibrate", "generate", "act_aligned", "tpo", "evaluate"}
    assert "act_stand_in" not in downstream("calibrate") and "perception" not in downstream("record")


def test_cache_keys_leave_out_settings_marked_so_and_keep_the_rest():
    from dataclasses import replace

    from embodied_gym.demo.stages import STAGES

    cfg = load_config("quick")
    base = {s.name: s.cache_settings(cfg, "PickCup") for s in STAGES}
    # how many processes run the same episodes changes no stage's key
    cfg2 = load_config("quick")
    cfg2.record = replace(cfg2.record, workers=7)
    cfg2.perception = replace(cfg2.perception, workers=7)
    cfg2.generate = replace(cfg2.generate, workers=7, backend="ray")
    cfg2.evaluate = replace(cfg2.evaluate, workers=7)
    cfg2.tpo = replace(cfg2.tpo, eval_workers=7, rollout_workers=7)
    cfg2.residual = replace(cfg2.residual, eval_workers=7)
    assert {s.name: s.cache_settings(cfg2, "PickCup") for s in STAGES} == base
    # perception.robot_offset belongs to perception_offset, not to the estimator's training
    cfg2.perception = replace(cfg2.perception, robot_offset=False)
    changed = {s.name for s in STAGES if s.cache_settings(cfg2, "PickCup") != base[s.name]}
    assert changed == {"perception_offset"}
    # and perception.sim_offset to perception_sim_offset
    cfg2.perception = replace(cfg2.perception, robot_offset=True, sim_offset=False)
    changed = {s.name for s in STAGES if s.cache_settings(cfg2, "PickCup") != base[s.name]}
    assert changed == {"perception_sim_offset"}
    # sim demos labelled with the sim's estimate: the policies learnt its bias, so nothing removes it in the sim
    cfg4 = load_config("quick")
    cfg4.sim_pose_source = "estimate"
    stage = next(s for s in STAGES if s.name == "perception_sim_offset")
    assert stage.skip(cfg4) and not stage.skip(cfg) and stage.cache_settings(cfg4, "PickCup") != base[stage.name]
    # a setting that changes a result changes its stage's key
    cfg3 = load_config("quick")
    cfg3.record = replace(cfg3.record, episodes=cfg3.record.episodes + 1)
    assert {s.name for s in STAGES if s.cache_settings(cfg3, "PickCup") != base[s.name]} == {"record"}
    # TPO rolls out on the observation the policies are recorded and evaluated on (the loop's pose_update)
    assert base["tpo"]["pose_update"] == cfg.pose_update == "at_reset" and cfg.evaluate.pose_update is None
    assert base["record"]["pose_update"] == base["generate"]["pose_update"] == "at_reset"


def test_evaluate_settings_name_only_what_the_loop_trains(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("evaluate: {policies: [expert, act_nominal]}\n")
    with pytest.raises(ValueError, match="act_nominal needs nominal_sim: true"):
        load_config("quick", str(bad))
    bad.write_text("evaluate: {in_sim: [tpo], policies: [act_aligned]}\n")
    with pytest.raises(ValueError, match=r"evaluate.in_sim: \['tpo'\]"):
        load_config("quick", str(bad))
    bad.write_text("evaluate: {comparisons: [[act_aligned, act_real]]}\n")
    with pytest.raises(ValueError, match="act_real"):
        load_config("quick", str(bad))
    bad.write_text("observation: images\nevaluate: {policies: [act_aligned, residual]}\n")
    with pytest.raises(ValueError, match="residual reads the pose estimate"):
        load_config("quick", str(bad))


def test_policy_benchmark_is_the_demo_stages_under_the_benchmark_profile(tmp_path, capsys):
    """benchmarks/policies.py at smoke sizes, two training seeds: the second seed's run reuses the first's
    perception, recording, calibration and data in place and trains only its own policies; every row asked
    for is evaluated on the stand-in and in both sims, the others are not trained; the pooled paired tests
    and the ranking metrics are computed from the runs' summaries. (Row f's stage runs in the smoke demo above.)"""
    import runpy

    sizes = tmp_path / "smoke_sizes.yaml"
    sizes.write_text(
        "max_episode_steps: 40\n"
        "perception: {episodes: 2, layouts_per_episode: 2, frame_stride: 8, workers: 1,\n"
        "             train: {steps: 4, batch_size: 4, eval_every: 2, save_every: 2, threads: 1}}\n"
        "record: {episodes: 3, workers: 1}\n"
        "calibrate: {surrogate_epochs: 1, refine_steps: 10, free: [kp.right_shoulder, kp.right_elbow]}\n"
        "generate: {episodes: 2, workers: 1}\n"
        "act: {steps: 4, batch_size: 2, save_every: 4}\n"
        "tpo: {iterations: 1, rollouts: 2, pairs: 1, epochs: 1, eval_episodes: 1}\n"
        "evaluate: {episodes: 1, workers: 1}\n"
    )
    benchmark = runpy.run_path("benchmarks/policies.py")
    # a later seed's (c) alone: no paired test between its rows, and none of the profile's (which name row b)
    only_c = benchmark["demo_args"]("PickCup", "default", 1, 0, tmp_path, ["c"])
    assert only_c[-1] == "--evaluate.comparisons" and "--no-nominal-sim" in only_c
    argv = ["--runs", str(tmp_path), "--name", "b", "--worlds", "default", "--seeds", "0", "1"]
    argv += ["--rows", "a", "b", "c", "d"]
    assert benchmark["main"]([*argv, "--config", str(sizes)]) == 0
    runs = tmp_path / "b" / "default" / "PickCup"
    first = json.loads((runs / "seed0" / "summary.json").read_text())["tasks"]["PickCup"]
    second = json.loads((runs / "seed1" / "summary.json").read_text())["tasks"]["PickCup"]
    assert not first["stages"]["act_nominal"]["outputs"].get("skipped")
    assert second["stages"]["tpo"]["folder"].startswith(str(runs / "seed1"))  # row d trains on each seed's (c)
    assert first["stages"]["residual"]["outputs"].get("skipped")  # row f not asked for
    for stage in ("perception", "record", "calibrate", "generate"):  # read in place from the first seed's run
        assert second["stages"][stage]["folder"] == first["stages"][stage]["folder"]
        assert second["stages"][stage]["cached"]
    assert second["stages"]["act_aligned"]["folder"].startswith(str(runs / "seed1"))
    assert set(first["evaluation"]) >= {
        f"{p}{w}" for p in ("act_stand_in", "act_nominal", "act_aligned") for w in ("", "_in_sim", "_in_nominal_sim")
    }
    saved = json.loads((tmp_path / "b" / "benchmark.json").read_text())
    rows = saved["results"]["default"]["PickCup"]["rows"]
    assert {r: len(rows[r]["policies"]) for r in rows} == {"a": 2, "b": 1, "c": 2, "d": 2}
    tests = saved["results"]["default"]["PickCup"]["tests"]
    assert tests["c_vs_a"]["n"] == tests["d_vs_c"]["n"] == 2  # 1 episode x 2 seeds, pooled
    assert saved["agreement"]["default"]["calibrated_sim"]["n"] == 7
    out = capsys.readouterr().out
    assert "| PickCup | (c) vs (a) |" in out and "MMRV" in out
    # each evaluation says where it ran
    for entry, where in [("act_aligned", "on the stand-in"), ("act_aligned_in_sim", "in the calibrated sim")]:
        assert re.search(rf"{entry} +success {where} ", out), entry
    assert re.search(r"act_aligned_in_nominal_sim +success in the nominal sim ", out)
    assert (tmp_path / "b" / "policies.png").stat().st_size > 0


def test_every_task_runs_through_the_loop(tmp_path, capsys):
    """`demo --profile smoke --tasks all`: every stage for each of the four tasks, one row per task in the
    printed table and in the report, each beside the paper's two numbers for it."""
    from embodied_gym.cli import main
    from embodied_gym.sim.tasks import TASKS

    assert main(["demo", "--profile", "smoke", "--tasks", "all", "--runs", str(tmp_path), "--name", "all"]) == 0
    summary = json.loads((tmp_path / "all" / "summary.json").read_text())
    assert list(summary["tasks"]) == list(TASKS)
    for task, t in summary["tasks"].items():
        assert list(t["stages"]) == list(STAGE_NAMES)
        assert (tmp_path / "all" / task / "evaluate" / "stage.json").exists()
        assert {"act_stand_in", "act_aligned"} <= set(t["evaluation"])
        assert t["evaluation"]["act_aligned"]["grasp_rate"] is not None  # every task reports its grasp term
    out = capsys.readouterr().out
    report = (tmp_path / "all" / "report.html").read_text()
    for task, cls in TASKS.items():
        before, after = cls.paper_success
        assert any(line.startswith(task) and f"{before} % -> {after} %" in line for line in out.splitlines())
        assert f"<tr><td>{task}</td>" in report


def test_images_profile_trains_act_on_visaligner_frames_end_to_end(tmp_path):
    """`demo --profile smoke_images` (the paper's own path, `observation: images`): the stand-in demos
    recorded with their camera, VisAligner trained on them, the calibrated-sim demos' frames rendered
    through it, ACT trained on those frames and evaluated on the stand-in's camera. TPO is left out
    here (its VisAligner rollouts are tested in test_policies)."""
    from embodied_gym.cli import main
    from embodied_gym.data.reader import RecordedDataset
    from embodied_gym.policies.act import latest_checkpoint

    args = ["demo", "--profile", "smoke_images", "--runs", str(tmp_path), "--name", "img"]
    assert main([*args, "--evaluate.policies", "act_stand_in", "act_aligned"]) == 0
    run = tmp_path / "img"
    stages = json.loads((run / "summary.json").read_text())["tasks"]["PickCup"]["stages"]
    assert stages["perception"]["outputs"]["skipped"]  # no pose estimator on this path
    assert (run / "visaligner" / "train" / "model").is_dir()
    raw = RecordedDataset(stages["generate"]["outputs"]["sim_dataset"])
    aligned = RecordedDataset(stages["generate"]["outputs"]["dataset"])
    assert aligned.total_episodes == raw.total_episodes == 2
    before, after = raw.frames("cam_high", 0), aligned.frames("cam_high", 0)
    assert before.shape == after.shape and before.shape[1:3] == (32, 40)
    assert np.abs(before.astype(int) - after.astype(int)).mean() > 1.0  # VisAligner re-rendered the frames
    config = json.loads(
        (latest_checkpoint(run / "act_aligned" / "policy") / "pretrained_model" / "config.json").read_text()
    )
    assert "observation.images.cam_high" in config["input_features"]
    assert "observation.environment_state" not in config["input_features"]
    evaluation = json.loads((run / "summary.json").read_text())["tasks"]["PickCup"]["evaluation"]
    assert set(evaluation) == {"act_stand_in", "act_aligned"} and evaluation["act_aligned"]["episodes"] == 1
    assert stages["tpo"]["outputs"].get("skipped") and stages["residual"]["outputs"].get("skipped")


def test_aligned_perception_trains_the_robots_estimator_on_visaligner_frames(tmp_path, capsys):
    """`perception.sources: [randomized, visaligner]`: the stand-in demos keep their video, VisAligner is
    fine-tuned from the shipped base model on them, and perception_aligned trains the robot's estimator on
    calibrated-sim episodes as VisAligner shows them plus the randomised looks, and re-reads the robot's
    demonstrations with it (what perception_offset measures its bias on); a stop in either stage resumes."""
    from embodied_gym.data.reader import open_dataset
    from embodied_gym.demo.stages import finished_outputs, sim_policy_estimator
    from embodied_gym.perception.pose_entry import estimator_source
    from embodied_gym.visaligner.configuration import BASE_MODEL_DIR, VisAlignerConfig
    from embodied_gym.visaligner.pipeline import CONFIG_NAME

    va = ["--visaligner.init", "base", "--visaligner.steps", "2", "--visaligner.batch-size", "1"]
    va += [
        "--visaligner.sample-steps",
        "1",
        "--perception.visaligner-episodes",
        "1",
        "--perception.visaligner-steps",
        "1",
    ]
    sources = ["--perception.sources", "randomized", "visaligner", "--evaluate.policies", "act_stand_in", "act_aligned"]
    from embodied_gym.cli import main

    assert main(["demo", "--profile", "smoke", "--runs", str(tmp_path), "--name", "va", *sources, *va]) == 0
    run = tmp_path / "va"
    stages = json.loads((run / "summary.json").read_text())["tasks"]["PickCup"]["stages"]
    rec = stages["record"]["outputs"]
    assert rec["video"] and rec["image_size"] == [240, 320]  # the frames the estimator reads
    assert open_dataset(rec["dataset"]).image_size("cam_high") == (240, 320)
    tuned = VisAlignerConfig.load(run / "visaligner" / "train" / "model" / CONFIG_NAME)
    assert tuned == VisAlignerConfig.load(BASE_MODEL_DIR / CONFIG_NAME)  # the base's model, fine-tuned
    aligned = stages["perception_aligned"]["outputs"]
    assert aligned["frames"] == [
        str(run / "perception" / "frames"),
        str(run / "perception_aligned" / "visaligner_frames"),
    ]
    assert list((run / "perception_aligned" / "visaligner_frames").glob("episode_*.npz"))
    robot = open_dataset(aligned["robot_dataset"])
    assert robot.total_episodes == rec["episodes"] and not robot.video_keys
    sha = estimator_source(aligned["model"])["sha256"]
    assert all(robot.row(i)["pose_estimator"]["sha256"] == sha for i in range(robot.total_episodes))
    # what the benchmarks evaluate the sim-trained policies with (perception_offset finds no grasp at these sizes)
    assert sim_policy_estimator(finished_outputs(run)) == aligned["model"]

    # stopped in VisAligner's fine-tune and in perception_aligned: the rerun continues both in their folders
    # (the fine-tune's last checkpoint is its final step, the frames are there) instead of starting over
    for stage in ("visaligner", "perception_aligned"):
        done = json.loads((run / stage / "stage.json").read_text())
        (run / stage / "stage.json").unlink()
        (run / stage / "stage.started.json").write_text(json.dumps({"key": done["key"]}))
    checkpoints = sorted(p.name for p in (run / "visaligner" / "train" / "checkpoints").iterdir())
    frames = {p: p.stat().st_mtime_ns for p in (run / "perception_aligned" / "visaligner_frames").glob("*.npz")}
    capsys.readouterr()
    assert main(["demo", "--profile", "smoke", "--runs", str(tmp_path), "--name", "va", *sources, *va]) == 0
    out = capsys.readouterr().err
    assert "visaligner: resuming the run a stop left unfinished" in out
    assert "perception_aligned: resuming the run a stop left unfinished" in out
    assert sorted(p.name for p in (run / "visaligner" / "train" / "checkpoints").iterdir()) == checkpoints
    assert {p: p.stat().st_mtime_ns for p in frames} == frames
    again = json.loads((run / "summary.json").read_text())["tasks"]["PickCup"]["stages"]
    assert [n for n, s in again.items() if not s["cached"]] == ["visaligner", "perception_aligned"]


def test_sim_trained_policies_read_the_best_robot_estimate():
    """On the robot the sim-trained policies read the bias-corrected estimator, else the one trained on
    VisAligner frames, else the one they were recorded with; the stand-in-demo policy its own."""
    from pathlib import Path

    from embodied_gym.demo.configuration import EvaluateStageConfig
    from embodied_gym.demo.stages import ROBOT, LoopSettings, StageContext, evaluation_runs

    loop = LoopSettings.of(load_config("smoke"), "PickCup")
    e = EvaluateStageConfig(policies=["act_stand_in", "act_aligned"], in_sim=[], in_nominal_sim=[])
    policies = {"act_stand_in": {"policy": "S"}, "act_aligned": {"policy": "A"}}
    for offset, aligned, want in (
        ({"model": "C"}, {"model": "V"}, "C"),
        ({"skipped": "no grasps"}, {"model": "V"}, "V"),
        ({"skipped": "no grasps"}, {"skipped": "sources"}, None),
    ):
        ctx = StageContext(loop, Path("."), {**policies, "perception_offset": offset, "perception_aligned": aligned})
        runs = {name: est for name, _, where, est in evaluation_runs(e, ctx) if where == ROBOT}
        assert runs == {"act_stand_in": None, "act_aligned": want}
