"""LOCUS: model embeddings from evaluations (arXiv 2601.21082)."""
