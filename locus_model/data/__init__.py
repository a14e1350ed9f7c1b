"""Evaluation data: the contract and its one validator (contract, errors), the readers of each format
(long_format, embedllm, mmlu_pro), the dense matrix (matrix), the model catalog (catalog), the synthetic
demo pool (demo) and the query encodings (encoding)."""
