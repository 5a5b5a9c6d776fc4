"""Signal records (nnc/stream/record.pyx): C-level only, nothing for Python."""
