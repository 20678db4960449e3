"""`embodied-gym demo`: the whole loop on the smoke profile, its artefacts, its cache and its config errors."""

import json
import shutil

import numpy as np
import pytest

from embodied_gym.demo.cache import StageCache
from embodied_gym.demo.config import load_config
from embodied_gym.demo.pipeline import STAGES


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    from embodied_gym.cli import main

    run = tmp_path_factory.mktemp("demo")
    assert main(["demo", "--profile", "smoke", "--runs", str(run), "--name", "s"]) == 0
    return run / "s"


def test_demo_writes_every_artefact_and_names_every_stage(smoke_run):
    summary = json.loads((smoke_run / "summary.json").read_text())
    stages = summary["tasks"]["PickCup"]["stages"]
    assert list(stages) == STAGES
    report = (smoke_run / "report.html").read_text()
    for stage in STAGES:
        assert f"<td>{stage}</td>" in report
        assert (smoke_run / stage / "stage.json").exists()
    assert "stand-in" in report and "data:image/png;base64," in report
    evaluation = summary["tasks"]["PickCup"]["evaluation"]
    assert set(evaluation) == {"expert", "act_real", "act_aligned", "tpo"}
    for e in evaluation.values():
        assert 0.0 <= e["ci95"][0] <= e["success_rate"] <= e["ci95"][1] <= 1.0
    # the learnt policies read the estimate, whose reset-frame error the report shows; the expert reads the truth
    assert evaluation["expert"].get("mean_reset_pose_error_cm") is None
    assert all(evaluation[n]["mean_reset_pose_error_cm"] > 0 for n in ("act_real", "act_aligned", "tpo"))
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
            latest_checkpoint(smoke_run / "act_real" / "policy") / "pretrained_model" / "embodied_gym_policy.json"
        ).read_text()
    )
    assert "values" not in real_meta["pose_estimator"]
    paired = summary["tasks"]["PickCup"]["paired"]
    assert [(c["a"], c["b"]) for c in paired] == [("act_aligned", "act_real"), ("tpo", "act_aligned")]
    assert all(c["n"] == 1 and 0 < c["p_value"] <= 1 for c in paired)
    assert "exact McNemar" in report
    # TPO's stage evaluated the aligned-sim policy and its iteration in the sim, and says which it returned
    tpo_log = stages["tpo"]["outputs"]["log"]
    assert [r["iteration"] for r in tpo_log] == [0, 1] and all("eval_success_rate" in r for r in tpo_log)
    assert "TPO returned" in report and "greedy success in the calibrated sim" in report
    # act_real trained in a background process (background_act_real, the default), its output in a log
    assert stages["act_real"]["background"] and not stages["act_aligned"]["background"]
    assert "train act" in (smoke_run / "act_real" / "stage.log").read_text()


def test_second_run_skips_cached_stages_and_from_reruns(smoke_run):
    from embodied_gym.cli import main

    assert main(["demo", "--profile", "smoke", "--runs", str(smoke_run.parent), "--name", "s"]) == 0
    stages = json.loads((smoke_run / "summary.json").read_text())["tasks"]["PickCup"]["stages"]
    assert all(s["cached"] for s in stages.values())
    assert (
        main(["demo", "--profile", "smoke", "--runs", str(smoke_run.parent), "--name", "s", "--from", "evaluate"]) == 0
    )
    stages = json.loads((smoke_run / "summary.json").read_text())["tasks"]["PickCup"]["stages"]
    assert [n for n, s in stages.items() if not s["cached"]] == ["evaluate"]

    # a changed setting reruns just its stage; `evaluate.expert: false` takes the expert's bar from
    # its recorded demonstrations (3 in the smoke profile) instead of evaluating it again
    override = smoke_run.parent / "no_expert.yaml"
    override.write_text("evaluate: {expert: false}\n")
    assert (
        main(["demo", "--profile", "smoke", "--runs", str(smoke_run.parent), "--name", "s", "--config", str(override)])
        == 0
    )
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


def test_cache_key_changes_with_settings_and_inputs(tmp_path):
    cache = StageCache(tmp_path, order=["a", "b"])
    calls = []
    a = cache.run("a", {"x": 1}, [], lambda f: calls.append("a") or {"v": 1})
    cache.run("b", {}, ["a"], lambda f: calls.append("b") or {})
    again = StageCache(tmp_path, order=["a", "b"])
    assert again.run("a", {"x": 1}, [], lambda f: calls.append("a2") or {}).cached
    assert not again.run("a", {"x": 2}, [], lambda f: calls.append("a3") or {}).cached  # settings changed
    assert not again.run("b", {}, ["a"], lambda f: calls.append("b2") or {}).cached  # its input changed
    assert calls == ["a", "b", "a3", "b2"] and a.outputs == {"v": 1}


def test_background_stage_runs_through_the_cache_and_a_failure_names_its_log(tmp_path):
    import functools
    import operator

    from embodied_gym.demo.pipeline import BackgroundStage

    cache = StageCache(tmp_path, order=["ok", "bad"])
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
    cfg = load_config("quick")
    assert cfg.tasks == ["PickCup"] and cfg.observation == "pose_estimate" and cfg.evaluate.episodes >= 30
    assert cfg.evaluate.pose_update == "at_reset"
    assert cfg.generate.episodes >= 4 * cfg.record.episodes
    assert load_config("smoke_images").observation == "images"


def test_full_profile_is_paper_image_act_at_240x320_on_cuda():
    from embodied_gym.policies.act.configuration import PRESETS
    from embodied_gym.visaligner.presets import preset

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
    from embodied_gym.visaligner.train import TrainConfig, train

    with pytest.raises(ValueError, match="torch sees no GPU.*--device cpu"):
        train(TrainConfig(dataset=str(tmp_path / "ds"), out=str(tmp_path / "out"), device="cuda"))
