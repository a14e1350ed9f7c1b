"""Diagnostics and trial tools: one-off questions about the method, one line each in bench/diag/README.md."""
