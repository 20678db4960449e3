"""Train VisAligner's base model on randomised sim looks (no robot) and, with --export, ship it.

    MUJOCO_GL=egl HF_HUB_OFFLINE=1 .venv/bin/python scripts/make_visaligner_base.py --export

writes runs/visaligner_base/ (paired.npz, checkpoints/, samples/, model/) and, with --export, the
package's embodied_gym/visaligner/base_model/ in half precision. A rerun resumes from the last
checkpoint. See embodied_gym.visaligner.base for what it learns from.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from embodied_gym import configs
from embodied_gym.visaligner.base import BaseModelConfig, train_base


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    configs.add_arguments(parser, BaseModelConfig, config_file=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    cfg = configs.from_args(BaseModelConfig, args, args.config)
    train_base(cfg)
    print(f"base model written to {cfg.out}/model" + (" and exported to the package" if cfg.export else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
