"""Signal records (nnc/record.pyx): C-level only, nothing for Python."""
