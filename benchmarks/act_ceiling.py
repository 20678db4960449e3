"""How well can ACT (LeRobot's ``ACTPolicy``, the ``cpu`` preset's sizes) learn PickCup when it is given
the cup's *true* position? An ablation in the nominal sim, not a deployable policy: the policy reads
``info["object_poses"]`` (privileged state), which no policy on the stand-in ever gets. It measures
ACT's training settings with perfect perception, at every 50 Hz step, in the nominal sim (no delay or
backlash); the policy benchmark, benchmarks/policies.py, gives ACT the camera's 10 Hz estimate instead.

Demos: ``--demos`` scripted-expert episodes (seeds 50000+), recorded up to 40 steps after success.
Training: joint state + true cup (x, y, z) -> 20-action chunks, normalised by the dataset's mean and
std (std floored at 1e-2, as embodied_gym.policies.act does), ``--steps`` AdamW steps of ``--batch``,
one torch thread. Evaluation: ``--eval`` episodes (seeds 100000+) in the sim, with temporal ensembling
(``ens``, coefficient 0.01) and with 10-action chunks (``chunk10``). Results: ``<out>/<name>.json``.

    # the three settings of BENCHMARKS.md, "ACT's learning rate"
    MUJOCO_GL=egl .venv/bin/python benchmarks/act_ceiling.py --name const1 --lr 1e-4 --sched const
    MUJOCO_GL=egl .venv/bin/python benchmarks/act_ceiling.py --name cos1d0 --lr 1e-4 --sched cos --dropout 0
    MUJOCO_GL=egl .venv/bin/python benchmarks/act_ceiling.py --name cos3 --lr 3e-4 --sched cos
"""

import argparse
import json
import math
import os
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from lerobot.configs.types import FeatureType, PolicyFeature
from lerobot.policies.act.configuration_act import ACTConfig
from lerobot.policies.act.modeling_act import ACTPolicy, ACTTemporalEnsembler

import embodied_gym

torch.set_num_threads(1)
p = argparse.ArgumentParser()
p.add_argument("--demos", type=int, default=200)
p.add_argument("--steps", type=int, default=8000)
p.add_argument("--lr", type=float, default=1e-4)
p.add_argument("--sched", default="const")
p.add_argument("--dropout", type=float, default=0.1)
p.add_argument("--chunk", type=int, default=20)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--dim", type=int, default=128)
p.add_argument("--vae", type=int, default=1)
p.add_argument("--eval", type=int, default=30)
p.add_argument("--noise", type=float, default=0.0, help="cup-position noise std (m) at train AND eval")
p.add_argument("--physics", help="a calibration result JSON: demos and evaluation in that calibrated sim")
p.add_argument(
    "--hold",
    type=int,
    default=1,
    help="the true position is read every this many steps and held in between (5: a 10 Hz camera under 50 Hz control)",
)
p.add_argument("--name", required=True)
p.add_argument("--out", default="runs/bench/act_ceiling")
a = p.parse_args()
os.makedirs(a.out, exist_ok=True)
CHUNK, EXTRA = a.chunk, 40
tag = (f"_{Path(a.physics).parent.parent.name}_{Path(a.physics).parent.name}" if a.physics else "") + (
    f"_hold{a.hold}" if a.hold > 1 else ""
)
cache = f"{a.out}/demos_{a.demos}{tag}.npz"
make_kw = {"physics": a.physics} if a.physics else {}


def cup_state(info):
    return np.asarray(info["object_poses"]["cup"][:3], np.float32)


if not os.path.exists(cache):
    env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state", terminate_on_success=False, **make_kw)
    ex = embodied_gym.make_expert(env)
    S, E, A, L = [], [], [], []
    for i in range(a.demos):
        obs, info = env.reset(seed=50000 + i)
        succ = None
        for t in range(400):
            if t % a.hold == 0:
                seen = cup_state(info)
            act = ex(obs, info)
            S.append(obs["joint_pos"])
            E.append(seen)
            A.append(np.asarray(act, np.float32))
            obs, r, te, tr, info = env.step(act)
            if info["is_success"] and succ is None:
                succ = t
            if (succ is not None and t >= succ + EXTRA) or tr:
                break
        L.append(t + 1)
    np.savez(cache, S=np.array(S), E=np.array(E), A=np.array(A), L=np.array(L))
d = np.load(cache)
S, E, A, L = d["S"], d["E"], d["A"], d["L"]
print("demos", len(L), "mean len", L.mean(), flush=True)
st = lambda x: (torch.tensor(x.mean(0)), torch.tensor(np.maximum(x.std(0), 1e-2)))
sm, ss = st(S)
em, es = st(E)
am, as_ = st(A)
starts = np.concatenate([[0], np.cumsum(L)[:-1]])
chunks, pads = [], []
for s0, T in zip(starts, L):
    for j in range(T):
        k = j + np.arange(CHUNK)
        pads.append(k >= T)
        chunks.append(A[s0 + np.minimum(k, T - 1)])
Sn = (torch.tensor(S) - sm) / ss
En = (torch.tensor(E) - em) / es
An = (torch.tensor(np.array(chunks)) - am) / as_
P = torch.tensor(np.array(pads))
cfg = ACTConfig(
    input_features={
        "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(14,)),
        "observation.environment_state": PolicyFeature(type=FeatureType.ENV, shape=(3,)),
    },
    output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(14,))},
    chunk_size=CHUNK,
    n_action_steps=10,
    dim_model=a.dim,
    n_heads=4,
    dim_feedforward=4 * a.dim,
    n_encoder_layers=2,
    n_decoder_layers=1,
    latent_dim=16,
    n_vae_encoder_layers=2,
    kl_weight=10.0,
    dropout=a.dropout,
    use_vae=bool(a.vae),
    device="cpu",
    push_to_hub=False,
    pretrained_backbone_weights=None,
)
torch.manual_seed(0)
pol = ACTPolicy(cfg)
pol.train()
opt = torch.optim.AdamW(pol.parameters(), lr=a.lr, weight_decay=1e-4)


def lr_at(s):
    if a.sched == "const":
        return a.lr
    w = 200
    if s < w:
        return a.lr * (s + 1) / w
    return a.lr * 0.5 * (1 + math.cos(math.pi * (s - w) / (a.steps - w)))


g = torch.Generator().manual_seed(0)
t0 = time.time()
run = []
for step in range(a.steps):
    for grp in opt.param_groups:
        grp["lr"] = lr_at(step)
    idx = torch.randint(len(Sn), (a.batch,), generator=g)
    e = En[idx]
    if a.noise:
        e = e + torch.randn_like(e) * (a.noise / es)
    loss, parts = pol.forward(
        {"observation.state": Sn[idx], "observation.environment_state": e, "action": An[idx], "action_is_pad": P[idx]}
    )
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(pol.parameters(), 10.0)
    opt.step()
    run.append(float(parts["l1_loss"]))
    if (step + 1) % 1000 == 0:
        print(step + 1, "l1", np.mean(run), f"{time.time() - t0:.0f}s", flush=True)
        run = []
print("trained", f"{time.time() - t0:.0f}s", flush=True)
torch.save(pol.state_dict(), f"{a.out}/{a.name}.pt")
pol.eval()
env = gym.make("EmbodieDreamer-PickCup-v0", obs_type="state", **make_kw)
res = {}
rng = np.random.default_rng(1)
for mode in ("ens", "chunk10"):
    if mode == "ens":
        pol.config.temporal_ensemble_coeff = 0.01
        pol.config.n_action_steps = 1
        pol.temporal_ensembler = ACTTemporalEnsembler(0.01, CHUNK)
    else:
        pol.config.temporal_ensemble_coeff = None
        pol.config.n_action_steps = 10
    wins, hs = [], []
    for i in range(a.eval):
        obs, info = env.reset(seed=100000 + i)
        pol.reset()
        h = 0
        t = 0
        noise = rng.normal(0, a.noise, 3).astype(np.float32) if a.noise else 0
        while True:
            if t % a.hold == 0:
                seen = cup_state(info)
            t += 1
            with torch.no_grad():
                act = pol.select_action(
                    {
                        "observation.state": ((torch.tensor(obs["joint_pos"]) - sm) / ss)[None].float(),
                        "observation.environment_state": ((torch.tensor(seen + noise) - em) / es)[None].float(),
                    }
                )
            obs, r, te, tr, info = env.step((act[0] * as_ + am).numpy())
            h = max(h, cup_state(info)[2])
            if te or tr:
                break
        wins.append(bool(info["is_success"]))
        hs.append(float(h))
    res[mode] = float(np.mean(wins))
    print(mode, "success", np.mean(wins), "max cup z", np.round(hs, 3).tolist(), flush=True)
with open(f"{a.out}/{a.name}.json", "w") as f:
    json.dump({"args": vars(a), **res}, f)
