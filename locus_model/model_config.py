"""The shape of a LOCUS model: LocusConfig (every width and count, its default and meaning, its checks).

No torch here: the pipeline builds its launchpad config from these fields when its code location loads, and a
checkpoint stores them as a plain dict (locus_model.model rebuilds the model with ``LocusConfig(**config)``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LocusConfig:
    """The widths and counts of a LOCUS model. Each field's docstring is its one description (the pipeline's
    launchpad shows it)."""

    query_dim: int = 768
    """D, width of the query encodings phi (768 all-mpnet-base-v2, 384 MiniLM)."""
    d: int = 128
    """Width of the tokens and of the model embedding z."""
    n_blocks: int = 2
    """L, ISAB blocks in the set encoder."""
    n_latents: int = 64
    """r, learned latents per ISAB block."""
    n_heads: int = 4
    """Attention heads (must divide d)."""
    predictor_hidden: int = 64
    """Hidden width of the correctness predictor's two-layer MLP."""
    predictor_dropout: float = 0.1
    """Dropout on that hidden layer during training (the authors' code release's 0.1)."""

    def __post_init__(self) -> None:
        if self.d % self.n_heads != 0:
            raise ValueError(f"LocusConfig: d={self.d} must be a multiple of n_heads={self.n_heads}.")
        for name in ("query_dim", "d", "n_blocks", "n_latents", "n_heads", "predictor_hidden"):
            if getattr(self, name) < 1:
                raise ValueError(f"LocusConfig: {name}={getattr(self, name)} must be >= 1.")
