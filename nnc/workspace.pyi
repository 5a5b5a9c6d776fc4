"""Stream workspaces (nnc/workspace.pyx): C-level only, nothing for Python."""
