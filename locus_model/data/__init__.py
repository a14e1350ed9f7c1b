"""Evaluation data: the contract and its one validator (contract, errors), one evaluation file streamed in chunks
(file_chunks), the readers of each format (long_format, embedllm, mmlu_pro), the dense matrix (matrix), the model
catalog (catalog), the synthetic pool (synthetic) and the query encodings (encoding)."""
