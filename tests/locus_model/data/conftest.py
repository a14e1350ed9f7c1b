"""The data tests' shared fixture: a small EmbedLLM folder (tests/locus_model/data/embedllm_folder.py)."""

from tests.locus_model.data.embedllm_folder import folder

__all__ = ["folder"]
