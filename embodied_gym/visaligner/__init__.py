"""VisAligner: conditional latent video diffusion from sim renders to the real camera's video (SPEC section 2)."""
