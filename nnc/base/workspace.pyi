"""Stream workspaces (nnc/base/workspace.pyx): C-level only, nothing for Python."""
