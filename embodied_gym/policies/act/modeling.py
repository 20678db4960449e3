"""LeRobot's ``ACTPolicy`` and its processors, built for an embodied-gym dataset.

The policy, its config, its pre/post processors and its normalisation are LeRobot 0.6.1's own
(``ACTConfig``, ``make_pre_post_processors``), with the dataset's statistics floored
(:func:`~embodied_gym.policies.act.data.normalisation_stats`); the backbone is initialised from a
local weights file or randomly, never downloaded.
"""

from __future__ import annotations

from pathlib import Path

import torch

from embodied_gym.data import features as F
from embodied_gym.data.reader import RecordedDataset
from embodied_gym.policies.act.configuration import ACTPreset
from embodied_gym.policies.act.data import normalisation_stats


def make_act_policy(
    ds: RecordedDataset,
    cameras: list[str],
    preset: ACTPreset,
    temporal_ensemble_coeff: float | None,
    device: str,
    backbone_weights: str | None = None,
    env_state: bool = False,
):
    """LeRobot ``ACTPolicy`` + its processors for ``cameras`` (may be empty: no ResNet), ``observation.state``
    and, with ``env_state``, ``observation.environment_state`` (ACT's environment-state token,
    mean/std-normalised with the floored std) -> ``action``.

    Raises:
        ValueError: neither a camera nor the environment state is an input (ACT needs one).

    Returns:
        ``(policy, preprocessor, postprocessor)``.
    """
    from lerobot.configs.types import FeatureType, NormalizationMode, PolicyFeature
    from lerobot.policies import make_pre_post_processors
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy

    if not cameras and not env_state:
        raise ValueError(
            f"ACT needs at least one input besides the joint state: dataset {ds.root} gives it no camera "
            f"and no {F.ENV_STATE}; record with --cameras, or with --pose-estimator DIR"
        )
    inputs = {F.STATE: PolicyFeature(type=FeatureType.STATE, shape=(14,))}
    if env_state:
        ds.require([F.ENV_STATE], "ACT with the environment-state input")
        inputs[F.ENV_STATE] = PolicyFeature(type=FeatureType.ENV, shape=tuple(ds.features[F.ENV_STATE]["shape"]))
    if cameras:
        h, w = preset.image_size or ds.image_size(cameras[0])
        inputs.update({F.image_key(c): PolicyFeature(type=FeatureType.VISUAL, shape=(3, h, w)) for c in cameras})
    cfg = ACTConfig(
        input_features=inputs,
        output_features={F.ACTION: PolicyFeature(type=FeatureType.ACTION, shape=(14,))},
        chunk_size=preset.chunk_size,
        n_action_steps=preset.n_action_steps,
        dim_model=preset.dim_model,
        n_heads=preset.n_heads,
        dim_feedforward=preset.dim_feedforward,
        n_encoder_layers=preset.n_encoder_layers,
        n_decoder_layers=preset.n_decoder_layers,
        latent_dim=preset.latent_dim,
        use_vae=preset.use_vae,
        n_vae_encoder_layers=preset.n_vae_encoder_layers,
        kl_weight=preset.kl_weight,
        optimizer_lr=preset.lr,
        optimizer_lr_backbone=preset.lr,
        vision_backbone=preset.vision_backbone,
        pretrained_backbone_weights=None,  # torchvision would download them; a local file is loaded below
        temporal_ensemble_coeff=temporal_ensemble_coeff,
        device=device,
        push_to_hub=False,
        normalization_mapping={
            "VISUAL": NormalizationMode.MEAN_STD,
            "STATE": NormalizationMode.MEAN_STD,
            "ENV": NormalizationMode.MEAN_STD,
            "ACTION": NormalizationMode.MEAN_STD,
        },
    )
    policy = ACTPolicy(cfg)
    if backbone_weights and cameras:
        load_backbone_weights(policy, backbone_weights)
    policy.to(device)
    pre, post = make_pre_post_processors(cfg, dataset_stats=normalisation_stats(ds))
    return policy, pre, post


#: How to make a backbone weights file offline (the error messages and docs/demo.md give it): ImageNet
#: ResNet-18 weights, as ACT trains from (Zhao et al., arXiv 2304.13705), saved on a machine with network.
BACKBONE_WEIGHTS_RECIPE = (
    'on a machine with network: python -c "import torchvision, safetensors.torch as st; '
    "st.save_file(torchvision.models.resnet18(weights='IMAGENET1K_V1').state_dict(), "
    "'resnet18_imagenet.safetensors')\", then copy resnet18_imagenet.safetensors here"
)


def _read_backbone_state(path: str) -> dict:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(
            f"backbone weights {path} not found; give a local ResNet state-dict file "
            f"(.safetensors, or .pth loadable with weights_only=True); {BACKBONE_WEIGHTS_RECIPE}"
        )
    if p.suffix == ".safetensors":
        from safetensors.torch import load_file

        state = load_file(str(p))
    else:
        state = torch.load(str(p), map_location="cpu", weights_only=True)
    return {k: v for k, v in state.items() if not k.startswith("fc.")}


def _load_into(backbone, state: dict, path: str, name: str) -> None:
    try:
        result = backbone.load_state_dict(state, strict=False)
    except RuntimeError as e:  # a tensor of another shape
        raise ValueError(f"{path} does not fit ACT's {name} backbone: {str(e).splitlines()[-1].strip()}") from None
    if result.missing_keys:
        raise ValueError(
            f"{path} does not fit ACT's {name} backbone; missing "
            f"{result.missing_keys[:5]}{'...' if len(result.missing_keys) > 5 else ''}"
        )


def load_backbone_weights(policy, path: str) -> None:
    """Initialise ACT's ResNet from a local torchvision-style state dict (no download).

    Raises:
        FileNotFoundError: ``path`` is not a file.
        ValueError: the weights do not fit the policy's backbone.
    """
    _load_into(policy.model.backbone, _read_backbone_state(path), path, policy.config.vision_backbone)


def check_backbone_weights(path: str, vision_backbone: str = "resnet18") -> None:
    """Check, before any training, that ``path`` loads into ACT's ``vision_backbone`` as
    :func:`load_backbone_weights` will (torchvision's network with LeRobot's frozen batch norm).

    Raises:
        FileNotFoundError: ``path`` is not a file.
        ValueError: an unknown backbone, or weights that do not fit it.
    """
    import torchvision
    from torchvision.ops.misc import FrozenBatchNorm2d

    if not vision_backbone.startswith("resnet") or not hasattr(torchvision.models, vision_backbone):
        raise ValueError(
            f"unknown ACT vision backbone {vision_backbone!r}; ACT uses a torchvision ResNet, e.g. resnet18"
        )
    state = _read_backbone_state(path)
    net = getattr(torchvision.models, vision_backbone)(weights=None, norm_layer=FrozenBatchNorm2d)
    net.fc = torch.nn.Identity()  # ACT keeps the layers up to layer4 (LeRobot's IntermediateLayerGetter)
    _load_into(net, state, path, vision_backbone)


__all__ = ["BACKBONE_WEIGHTS_RECIPE", "check_backbone_weights", "load_backbone_weights", "make_act_policy"]
