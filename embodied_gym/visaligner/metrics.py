"""Video metrics for VisAligner: PSNR, SSIM, temporal flicker, Fréchet distances, LPIPS/FVD.

Videos are ``(T, H, W, 3)`` uint8 arrays. Nothing here downloads weights:

- :func:`psnr`, :func:`ssim`, :func:`flicker` need none.
- ``FD-local3D`` (:class:`Local3DFeatureNet`, :func:`train_local3d`, :func:`fd_local3d`): Fréchet
  distance on the features of a small 3D conv net trained *here* (on the training episodes: real
  clips vs sim-render clips vs temporally shuffled real clips). It is a proxy, never FVD; its
  weights' SHA-256 goes with every number.
- :class:`LPIPS` and :class:`FVD` only from weight files the user gives (their SHA-256 is recorded).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import numpy as np
import torch

from embodied_gym.atomic import atomic_path

PSNR_CAP_DB = 100.0  # the PSNR of identical frames (the MSE is 0)


def _check_pair(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        raise ValueError(f"videos must have the same shape, got {a.shape} and {b.shape}")
    if a.ndim == 3:
        a, b = a[None], b[None]
    if a.ndim != 4 or a.shape[-1] != 3:
        raise ValueError(f"expected (T, H, W, 3) or (H, W, 3) frames, got {a.shape}")
    return a, b


def psnr(a: np.ndarray, b: np.ndarray, mask: np.ndarray | None = None) -> float:
    """Mean per-frame PSNR (dB, max 255), capped at :data:`PSNR_CAP_DB`; with ``mask`` ``(T, H, W)``
    only the masked pixels count (frames with an empty mask are skipped; NaN if all are)."""
    a, b = _check_pair(a, b)
    err = (a.astype(np.float64) - b.astype(np.float64)) ** 2
    vals = []
    for t in range(len(a)):
        e = err[t] if mask is None else err[t][np.asarray(mask[t], bool)]
        if e.size == 0:
            continue
        mse = e.mean()
        vals.append(PSNR_CAP_DB if mse == 0 else min(PSNR_CAP_DB, 10 * np.log10(255.0**2 / mse)))
    return float(np.mean(vals)) if vals else float("nan")


def ssim(a: np.ndarray, b: np.ndarray) -> float:
    """Mean per-frame SSIM (scikit-image's uniform 7x7 window, data range 255, channels averaged)."""
    from skimage.metrics import structural_similarity

    a, b = _check_pair(a, b)
    win = min(7, *(s - (1 - s % 2) for s in a.shape[1:3]))
    return float(
        np.mean([structural_similarity(x, y, channel_axis=-1, data_range=255, win_size=win) for x, y in zip(a, b)])
    )


def flicker(generated: np.ndarray, real: np.ndarray) -> float:
    """Temporal flicker: mean absolute difference between the consecutive-frame changes of the
    generated and the real video, ``mean |(g[t+1] - g[t]) - (r[t+1] - r[t])| / 255`` over frames and
    pixels. 0 when the generated video changes exactly as the real one does."""
    g, r = _check_pair(generated, real)
    if len(g) < 2:
        raise ValueError("flicker needs at least 2 frames")
    dg, dr = np.diff(g.astype(np.float64), axis=0), np.diff(r.astype(np.float64), axis=0)
    return float(np.abs(dg - dr).mean() / 255.0)


def frechet_distance(mu1: np.ndarray, sigma1: np.ndarray, mu2: np.ndarray, sigma2: np.ndarray) -> float:
    """Fréchet distance between Gaussians: ``|mu1 - mu2|^2 + Tr(S1 + S2 - 2 (S1 S2)^(1/2))``."""
    from scipy import linalg

    mu1, mu2 = np.atleast_1d(mu1).astype(np.float64), np.atleast_1d(mu2).astype(np.float64)
    s1, s2 = np.atleast_2d(sigma1).astype(np.float64), np.atleast_2d(sigma2).astype(np.float64)
    covmean = linalg.sqrtm(s1 @ s2)
    if not np.isfinite(covmean).all():  # singular product: regularise, as the FID reference code does
        eps = 1e-6 * np.eye(len(s1))
        covmean = linalg.sqrtm((s1 + eps) @ (s2 + eps))
    covmean = covmean.real
    return float(((mu1 - mu2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * np.trace(covmean))


def feature_stats(features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    f = np.asarray(features, dtype=np.float64)
    if f.ndim != 2 or len(f) < 2:
        raise ValueError(f"need (n >= 2, d) features, got {f.shape}")
    return f.mean(axis=0), np.cov(f, rowvar=False)


def frechet_distance_features(f1: np.ndarray, f2: np.ndarray) -> float:
    """Fréchet distance between the Gaussians fitted to two feature sets ``(n, d)``."""
    return frechet_distance(*feature_stats(f1), *feature_stats(f2))


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def video_clips(video: np.ndarray, length: int = 8, stride: int = 4, step: int = 2) -> np.ndarray:
    """Clips ``(n, length, H, W, 3)`` of frames ``stride`` apart, starting every ``step`` frames."""
    video = np.asarray(video)
    span = (length - 1) * stride
    starts = range(0, len(video) - span, step)
    if not len(starts):
        raise ValueError(f"a video of {len(video)} frames is too short for clips of {length} frames {stride} apart")
    return np.stack([video[s : s + span + 1 : stride] for s in starts])


# ---------------------------------------------------------------------- FD-local3D
class Local3DFeatureNet(torch.nn.Module):
    """A small 3D conv net on ``(B, 3, T, H, W)`` clips in [-1, 1]; :meth:`features` is the
    ``feature_dim`` vector FD-local3D uses."""

    def __init__(self, feature_dim: int = 32, classes: int = 3):
        super().__init__()
        c = [3, 16, 32, 64]
        layers = []
        for i in range(3):
            layers += [
                torch.nn.Conv3d(c[i], c[i + 1], 3, stride=(1, 2, 2), padding=1),
                torch.nn.GroupNorm(4, c[i + 1]),
                torch.nn.SiLU(),
            ]
        self.body = torch.nn.Sequential(*layers)
        self.proj = torch.nn.Linear(c[-1], feature_dim)
        self.head = torch.nn.Linear(feature_dim, classes)

    def features(self, clips: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.proj(self.body(clips).mean(dim=(2, 3, 4))))

    def forward(self, clips: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(clips))


def _clip_tensor(clips: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(clips)).float().permute(0, 4, 1, 2, 3) / 127.5 - 1


@dataclass
class Local3DResult:
    path: str
    sha256: str
    final_loss: float
    accuracy: float


def train_local3d(
    real_videos: list[np.ndarray],
    sim_videos: list[np.ndarray],
    path: str | os.PathLike,
    steps: int = 300,
    batch: int = 16,
    seed: int = 0,
    clip_length: int = 8,
    stride: int = 4,
    progress: bool = True,
) -> Local3DResult:
    """Train :class:`Local3DFeatureNet` to tell real clips, sim-render clips and temporally
    shuffled real clips apart; save it (safetensors) to ``path``; return its hash."""
    from safetensors.torch import save_file

    from embodied_gym.progress import progress_bar

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    real = np.concatenate([video_clips(v, clip_length, stride) for v in real_videos])
    sim = np.concatenate([video_clips(v, clip_length, stride) for v in sim_videos])
    net = Local3DFeatureNet()
    opt = torch.optim.AdamW(net.parameters(), lr=2e-3)
    loss_v, acc = float("nan"), float("nan")
    for _ in progress_bar(range(steps), progress=progress, desc="FD-local3D net"):
        k = batch // 3
        r = real[rng.integers(len(real), size=k)]
        s = sim[rng.integers(len(sim), size=k)]
        sh = real[rng.integers(len(real), size=batch - 2 * k)].copy()
        for clip in sh:
            rng.shuffle(clip)  # shuffles the frame order
        x = _clip_tensor(np.concatenate([r, s, sh]))
        y = torch.tensor([0] * k + [1] * k + [2] * (batch - 2 * k))
        logits = net(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss_v, acc = loss.item(), float((logits.argmax(1) == y).float().mean())
    with atomic_path(path) as tmp:
        save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(tmp))
    return Local3DResult(os.fspath(path), file_sha256(path), loss_v, acc)


def load_local3d(path: str | os.PathLike) -> Local3DFeatureNet:
    from safetensors.torch import load_file

    net = Local3DFeatureNet()
    net.load_state_dict(load_file(os.fspath(path)))
    return net.eval()


@torch.no_grad()
def local3d_features(
    net: Local3DFeatureNet, videos: list[np.ndarray], clip_length: int = 8, stride: int = 4, batch: int = 32
) -> np.ndarray:
    clips = np.concatenate([video_clips(v, clip_length, stride) for v in videos])
    return np.concatenate(
        [net.features(_clip_tensor(clips[i : i + batch])).numpy() for i in range(0, len(clips), batch)]
    )


def fd_local3d(net: Local3DFeatureNet, generated: list[np.ndarray], real: list[np.ndarray], **kw) -> float:
    """FD-local3D between sets of generated and real videos (a proxy, not FVD)."""
    return frechet_distance_features(local3d_features(net, generated, **kw), local3d_features(net, real, **kw))


# ---------------------------------------------------------------------- user-supplied networks
def _require_file(path, what: str) -> str:
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{what} weights {path!r} not found; supply the file (nothing is downloaded)")
    return path


class LPIPS:
    """LPIPS (AlexNet variant) from two user files: torchvision AlexNet weights (``alexnet-owt-*.pth``)
    and the LPIPS linear layers (``alex.pth`` of the ``lpips`` package, keys ``lin{0..4}.model.1.weight``).
    ``sha256`` records both files."""

    _LAYERS = (1, 4, 7, 9, 11)  # relu outputs of torchvision's alexnet.features
    _SHIFT = torch.tensor([-0.030, -0.088, -0.188]).view(1, 3, 1, 1)
    _SCALE = torch.tensor([0.458, 0.448, 0.450]).view(1, 3, 1, 1)

    def __init__(self, alexnet_weights: str | os.PathLike, lpips_weights: str | os.PathLike):
        from torchvision.models import alexnet

        a, l_ = _require_file(alexnet_weights, "AlexNet"), _require_file(lpips_weights, "LPIPS linear-layer")
        net = alexnet()
        net.load_state_dict(torch.load(a, map_location="cpu", weights_only=True))
        self.features = net.features.eval()
        lin = torch.load(l_, map_location="cpu", weights_only=True)
        self.lins = [lin[f"lin{i}.model.1.weight"].float() for i in range(5)]
        self.sha256 = {"alexnet": file_sha256(a), "lpips": file_sha256(l_)}

    @torch.no_grad()
    def __call__(self, a: np.ndarray, b: np.ndarray) -> float:
        a, b = _check_pair(a, b)

        def feats(x):
            x = (torch.from_numpy(x).float().permute(0, 3, 1, 2) / 127.5 - 1 - self._SHIFT) / self._SCALE
            out = []
            for i, layer in enumerate(self.features):
                x = layer(x)
                if i in self._LAYERS:
                    out.append(x / (x.norm(dim=1, keepdim=True) + 1e-10))
            return out

        total = torch.zeros(())
        for fa, fb, w in zip(feats(a), feats(b), self.lins):
            total = total + torch.nn.functional.conv2d((fa - fb) ** 2, w).mean(dim=(1, 2, 3))
        return float(total.mean())


class FVD:
    """FVD with a user-supplied I3D TorchScript file (StyleGAN-V's ``i3d_torchscript.pt``): 16-frame
    clips resized to 224x224 in [-1, 1], the 400-d logits as features. ``sha256`` records the file."""

    def __init__(self, i3d_torchscript: str | os.PathLike):
        path = _require_file(i3d_torchscript, "I3D (TorchScript)")
        self.model = torch.jit.load(path, map_location="cpu").eval()
        self.sha256 = file_sha256(path)

    @torch.no_grad()
    def features(self, videos: list[np.ndarray]) -> np.ndarray:
        clips = np.concatenate([video_clips(v, 16, 1, 16) for v in videos])
        x = torch.from_numpy(clips).float().permute(0, 4, 1, 2, 3) / 127.5 - 1
        x = torch.nn.functional.interpolate(x.flatten(1, 2), size=(224, 224), mode="bilinear").view(
            len(clips), 3, 16, 224, 224
        )
        return self.model(x, rescale=False, resize=False, return_features=True).numpy()

    def __call__(self, generated: list[np.ndarray], real: list[np.ndarray]) -> float:
        return frechet_distance_features(self.features(generated), self.features(real))
