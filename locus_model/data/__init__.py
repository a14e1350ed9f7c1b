"""Evaluation data: the contract and its one validator (contract, errors), the readers of each format
(long_format, embedllm, mmlu_pro), the dense matrix (matrix), the model catalog (catalog), the synthetic
synthetic pool (synthetic) and the query encodings (encoding)."""
