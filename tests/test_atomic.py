"""Atomic writes: the old file survives a failed write, and no temporary is left behind."""

from __future__ import annotations

import numpy as np
import pytest

from embodied_gym import atomic


def test_failed_write_keeps_the_old_file(tmp_path):
    target = tmp_path / "result.json"
    atomic.write_json(target, {"a": 1})
    with pytest.raises(RuntimeError), atomic.atomic_path(target) as tmp:
        tmp.write_text('{"a": ')  # half written
        raise RuntimeError("killed mid-write")
    assert target.read_text().replace(" ", "").replace("\n", "") == '{"a":1}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]


def test_atomic_path_keeps_the_suffix_writers_need(tmp_path):
    target = tmp_path / "cache.npz"
    with atomic.atomic_path(target) as tmp:
        np.savez(tmp, x=np.arange(3))  # np.savez appends .npz to a path without it
    np.testing.assert_array_equal(np.load(target)["x"], np.arange(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache.npz"]


def test_atomic_dir_replaces_a_folder_whole(tmp_path):
    target = tmp_path / "model"
    with atomic.atomic_dir(target) as d:
        (d / "weights").write_text("v1")
    with pytest.raises(KeyboardInterrupt), atomic.atomic_dir(target) as d:
        (d / "weights").write_text("v2-partial")
        raise KeyboardInterrupt
    assert (target / "weights").read_text() == "v1"
    with atomic.atomic_dir(target) as d:
        (d / "weights").write_text("v2")
    assert (target / "weights").read_text() == "v2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
