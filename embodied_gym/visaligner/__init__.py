"""VisAligner: conditional latent video diffusion from sim renders to the real camera's video (EmbodieDreamer, arXiv 2507.05198: VisAligner)."""
