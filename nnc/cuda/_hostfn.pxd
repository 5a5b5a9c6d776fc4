# One armed wait: a Python callable to run once a CUDA stream reaches a host-function node.
# Allocated by arm(), handed to the driver as the host function's userData, pushed on the
# done list by the callback (without the GIL), freed by the watcher thread after wake() ran.
ctypedef struct hostfn_arm_t:
    hostfn_arm_t* next                  # done-list link; NULL until the callback ran
    void* wake                          # PyObject*: one owned reference to the callable
