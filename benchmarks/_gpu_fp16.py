"""nnc's float32 replay for ``benchmarks.gpu --precision fp16``: timed in the same interleaved
rounds as the float16 configurations, so that the target "fp16 faster than fp32" is read in
one process, on one device, rather than across two runs' files."""


class Fp32Replay:
    """``graph`` (a float32 GPU copy of Inception on its static schedule) captured into a CUDA
    graph on stream ``s``; a call replays it and waits. ``logits`` is node ``out_index``'s
    output. ``graph`` is kept: the capture runs on its memory."""

    def __init__(self, graph, out_index, s):
        from nnc.cuda.capture import capture

        self.graph, self.s = graph, s
        self.cg = capture(graph, s)         # runs ``graph`` once first (compiles the kernels)
        self.logits = graph.execs[out_index].outputs[0]

    def __call__(self):
        self.cg.replay(self.s)
        self.s.wait()

    def check(self, want, rel_err):
        """One replay's logits, zeroed on the device first, against ``want``: what
        ``rel_err(got, want)`` says of them."""
        from nnc.cuda import memory

        memory.fill_zero(self.logits)
        self()
        return rel_err(self.logits.numpy(), want)
