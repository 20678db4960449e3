"""One checkpoint scheme: atomic folders, last.json with an explicit unit, old layouts still read."""

from __future__ import annotations

import json

import pytest

from embodied_gym.checkpoints import CheckpointStore


def test_save_latest_and_keep(tmp_path):
    store = CheckpointStore(tmp_path, unit="step", keep=2)
    assert store.latest() is None
    for step in (100, 200, 300):
        store.save(step, lambda d, s=step: (d / "weights.txt").write_text(str(s)))
    last = store.latest()
    assert last.counter == 300 and last.unit == "step" and (last.path / "weights.txt").read_text() == "300"
    assert sorted(p.name for p in store.root.iterdir()) == ["000200", "000300", "last.json"]
    assert json.loads((store.root / "last.json").read_text()) == {"path": "000300", "unit": "step", "step": 300}


def test_a_failed_save_leaves_the_previous_checkpoint(tmp_path):
    store = CheckpointStore(tmp_path, unit="iteration")
    store.save(1, lambda d: (d / "w").write_text("1"))

    def crash(d):
        (d / "w").write_text("partial")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        store.save(2, crash)
    last = store.latest()
    assert last.counter == 1 and (last.path / "w").read_text() == "1"
    assert not (store.root / "000002").exists()


def test_reads_the_layout_written_before_units(tmp_path):
    """TPO stored its iteration under "step"; ACT its step. Both still resume."""
    root = tmp_path / "checkpoints"
    (root / "000003").mkdir(parents=True)
    (root / "last.json").write_text(json.dumps({"step": 3, "path": "000003"}))
    assert CheckpointStore(tmp_path, unit="iteration").latest().counter == 3


def test_another_trainers_folder_is_refused(tmp_path):
    CheckpointStore(tmp_path, unit="step").save(5, lambda d: None)
    with pytest.raises(ValueError, match="counted in steps, not iterations"):
        CheckpointStore(tmp_path, unit="iteration").latest()


def test_latest_reads_any_unit(tmp_path):
    from embodied_gym.checkpoints import latest

    CheckpointStore(tmp_path / "tpo", unit="iteration").save(2, lambda d: None)
    assert latest(tmp_path / "tpo").counter == 2 and latest(tmp_path / "tpo").unit == "iteration"
    assert latest(tmp_path / "none") is None
