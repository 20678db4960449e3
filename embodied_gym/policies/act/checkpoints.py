"""ACT checkpoints: a LeRobot ``pretrained_model`` folder plus the state to resume training.

Layout of a training output folder ``out`` (ACT counts optimisation steps, TPO iterations;
:class:`embodied_gym.checkpoints.CheckpointStore` keeps the counter's unit)::

    out/checkpoints/<counter>/pretrained_model/   the policy (config.json, model.safetensors, processors,
                                                  embodied_gym_policy.json: what an env must give it)
    out/checkpoints/<counter>/training_state/     optimizer, RNG states (for --resume)
    out/checkpoints/last.json                     which checkpoint is the latest, and the unit

``ACTPolicy.from_pretrained`` and ``lerobot-eval --policy.path`` read ``pretrained_model`` too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from embodied_gym.checkpoints import CheckpointStore, latest

POLICY_META = "embodied_gym_policy.json"  # cameras, image size, control mode: what an env must give the policy
MODEL_DIR = "pretrained_model"
STATE_DIR = "training_state"


def save_checkpoint(
    store: CheckpointStore, counter: int, policy, pre, post, optimizer, generator: torch.Generator, meta: dict
) -> Path:
    """Write checkpoint ``counter`` (a step or an iteration, as ``store.unit`` says) atomically."""
    from lerobot.optim.optimizers import save_optimizer_state
    from safetensors.torch import save_file

    def write(folder: Path) -> None:
        model_dir, state_dir = folder / MODEL_DIR, folder / STATE_DIR
        policy.save_pretrained(model_dir)
        pre.save_pretrained(model_dir)
        post.save_pretrained(model_dir)
        (model_dir / POLICY_META).write_text(json.dumps(dict(meta, **{store.unit: counter}), indent=2))
        state_dir.mkdir(parents=True)
        save_optimizer_state(optimizer, state_dir)
        save_file(
            {"torch_rng": torch.get_rng_state(), "sampler_rng": generator.get_state()},
            str(state_dir / "rng_state.safetensors"),
        )
        if store.unit == "step":  # LeRobot's own training-state file, which its resume reads
            (state_dir / "training_step.json").write_text(json.dumps({"step": counter}))

    return store.save(counter, write).path


def load_training_state(checkpoint: Path, policy, optimizer, generator: torch.Generator):
    """Restore the policy weights, optimizer and RNG states of ``checkpoint``; returns the optimizer."""
    from lerobot.optim.optimizers import load_optimizer_state
    from lerobot.policies.act.modeling_act import ACTPolicy
    from safetensors.torch import load_file

    loaded = ACTPolicy.from_pretrained(str(checkpoint / MODEL_DIR))
    policy.load_state_dict(loaded.state_dict())
    optimizer = load_optimizer_state(optimizer, checkpoint / STATE_DIR)
    rng = load_file(str(checkpoint / STATE_DIR / "rng_state.safetensors"))
    torch.set_rng_state(rng["torch_rng"])
    generator.set_state(rng["sampler_rng"])
    return optimizer


def latest_checkpoint(out: str | os.PathLike) -> Path | None:
    """The latest checkpoint folder of a training output folder (ACT's or TPO's), or None."""
    last = latest(out)
    return last.path if last is not None else None


def resolve_pretrained_dir(path: str | os.PathLike) -> Path:
    """A ``pretrained_model`` folder from: itself, a checkpoint folder, or a training output folder
    (ACT's or TPO's).

    Raises:
        FileNotFoundError: ``path`` holds none of those.
    """
    p = Path(path)
    for cand in (p, p / MODEL_DIR):
        if (cand / "config.json").exists() and (cand / "model.safetensors").exists():
            return cand
    ckpt = latest_checkpoint(p)
    if ckpt is not None:
        return ckpt / MODEL_DIR
    raise FileNotFoundError(
        f"{path} holds no policy: expected a LeRobot pretrained_model folder (config.json, "
        f"model.safetensors), a checkpoint folder, or an `embodied-gym train act --out` folder"
    )


__all__ = ["POLICY_META", "latest_checkpoint", "load_training_state", "resolve_pretrained_dir", "save_checkpoint"]
