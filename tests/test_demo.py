"""`embodied-gym demo`: the whole loop on the smoke profile, its artefacts, its cache and its config errors."""

import json

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
    assert (smoke_run / "calibrate" / "result.json").exists()


def test_second_run_skips_cached_stages_and_from_reruns(smoke_run):
    from embodied_gym.cli import main

    assert main(["demo", "--profile", "smoke", "--runs", str(smoke_run.parent), "--name", "s"]) == 0
    stages = json.loads((smoke_run / "summary.json").read_text())["tasks"]["PickCup"]["stages"]
    assert all(s["cached"] for s in stages.values())
    assert main(["demo", "--profile", "smoke", "--runs", str(smoke_run.parent), "--name", "s", "--from", "evaluate"]) == 0
    stages = json.loads((smoke_run / "summary.json").read_text())["tasks"]["PickCup"]["stages"]
    assert [n for n, s in stages.items() if not s["cached"]] == ["evaluate"]

    # a changed setting reruns just its stage; `evaluate.expert: false` takes the expert's bar from
    # its recorded demonstrations (3 in the smoke profile) instead of evaluating it again
    override = smoke_run.parent / "no_expert.yaml"
    override.write_text("evaluate: {expert: false}\n")
    assert main(["demo", "--profile", "smoke", "--runs", str(smoke_run.parent), "--name", "s",
                 "--config", str(override)]) == 0
    summary = json.loads((smoke_run / "summary.json").read_text())["tasks"]["PickCup"]
    assert [n for n, s in summary["stages"].items() if not s["cached"]] == ["evaluate"]
    expert = summary["evaluation"]["expert"]
    recorded = summary["stages"]["record"]["outputs"]["expert_success"]
    assert expert["episodes"] == 3 and expert["source"].startswith("record")
    assert expert["success_rate"] == pytest.approx(recorded) and expert["ci95"][0] <= recorded <= expert["ci95"][1]
    assert "expert (recorded demos)" in (smoke_run / "report.html").read_text()


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
    cfg = load_config("quick")
    assert cfg.tasks == ["PickCup"] and cfg.record.image_size == (64, 80)
