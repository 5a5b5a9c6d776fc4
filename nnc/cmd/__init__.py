"""Layer 2 command. Commands: the registry, backends, selection, binding and `cmd_exec` (command),
parameter normalisation (params); the built-in commands, one folder per command family
(nnc/cmd/<family>/: definition, CPU_REF, CPU backends), registered by builtins. Imports layers 0-1.
A family's gpu/ folder (nnc/cmd/<family>/gpu/: its GPU backends) is layer 3, beside nnc.cuda, whose
runner it launches through: nothing here imports it; nnc.cuda.builtins registers it.
"""

# The module this package was before the layer folders: its names stay importable here
# (``from nnc.cmd import ...`` and pickles made before the move).
from nnc.cmd.command import *  # noqa: E402, F401, F403
