"""The GPU peers of benchmarks/gpu.py: the network nnc runs, with the same weights (the ONNX
model ``nnc.onnx.save`` wrote from nnc's graph), in what a user would run instead on the same
GPU.

- ``torch_eager``: benchmarks/_torch_eager.py's op-by-op PyTorch eager loop on CUDA;
- ``torch_cuda_graphs``: that loop's step captured once into a ``torch.cuda.CUDAGraph`` and
  replayed, as torch's CUDA-graphs documentation does it: static inputs, three warm-up steps on
  a side stream (so cuDNN's algorithm search and the caching allocator settle outside the
  capture), then capture (in thread-local mode: nnc's threads are idle, but not torch's
  business) and ``replay()``;
- ``ort_cuda``: onnxruntime's CUDA execution provider through ``nnc.models.peers.OrtRun``
  with ``device="cuda:N"``: inputs and outputs bound to device memory (IOBinding), TF32 off.

PyTorch settings, the same for both torch columns and recorded in the report: channels_last
activations and convolution weights, ``torch.inference_mode``, float32 with TF32 off for
convolutions and matrix products (nnc's kernels compute in float32; cuDNN uses TF32 by
default on Ampere and later, which would make the peers both faster and less exact than
nnc), and ``torch.backends.cudnn.benchmark`` **on**: cuDNN times its algorithms for each
convolution shape during the untimed warm-up runs, PyTorch's fastest setting for a network
whose shapes never change.

Every call of a peer returns when its outputs are ready on the device (a device
synchronisation), and ``fetch_outputs()`` copies them to the host for the output check.
A peer that cannot run here is reported as ``unavailable: <reason>``, never as a failure.
"""

import sys
import traceback

PEERS = ("torch_eager", "torch_cuda_graphs", "ort_cuda")


def torch_cuda_reason(ordinal):
    """None when PyTorch can run on CUDA device ``ordinal``, else why not."""
    try:
        import torch
    except ImportError as e:
        return f"torch is not installed ({e})"
    if not torch.cuda.is_available():
        return (f"torch {torch.__version__} sees no CUDA device "
                f"(built for CUDA {torch.version.cuda})")
    if ordinal >= torch.cuda.device_count():
        return f"torch sees {torch.cuda.device_count()} CUDA device(s), not cuda:{ordinal}"
    return None


def configure_torch(cudnn_benchmark=True):
    """Set the PyTorch settings above (process-wide); returns them with torch's versions."""
    import torch

    torch.backends.cudnn.benchmark = bool(cudnn_benchmark)
    conv = getattr(torch.backends.cudnn, "conv", None)
    if conv is not None and hasattr(conv, "fp32_precision"):
        # torch >= 2.9: the precision API (mixing it with the allow_tf32 flags is an error).
        conv.fp32_precision = "ieee"
        torch.backends.cuda.matmul.fp32_precision = "ieee"
    else:
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    return {"torch": str(torch.__version__), "torch_cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "cudnn_benchmark": bool(cudnn_benchmark),
            "tf32": False, "memory_format": "channels_last", "mode": "inference_mode"}


class TorchGraphs:
    """A TorchEager's step captured into one CUDA graph; a call replays it and waits."""

    def __init__(self, eager, warmup=3):
        torch = self.torch = eager.torch
        self.device = eager.device
        with torch.cuda.device(self.device):
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(warmup):
                    eager.step()
            torch.cuda.current_stream().wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
                self.device_outputs = eager.step()
        self.warmup = warmup

    def __call__(self):
        self.graph.replay()
        self.torch.cuda.synchronize(self.device)

    def fetch_outputs(self):
        return [t.contiguous().cpu().numpy() for t in self.device_outputs]

    def describe(self):
        return (f"PyTorch {self.torch.__version__} torch.cuda.CUDAGraph replay of the eager step "
                f"on {self.device} ({self.warmup} warm-up steps on a side stream, then capture)")


def _failed(e, say):
    say("".join(traceback.format_exception(e)).rstrip())
    return f"{type(e).__name__}: {e}"


def make_peers(model, feeds, ordinal, names=PEERS, cudnn_benchmark=True, say=None):
    """The peers in ``names`` for ONNX ``model`` and input arrays ``feeds``, on GPU ``ordinal``.

    Returns ``(peers, unavailable, settings)``: name -> callable with ``fetch_outputs()`` and
    ``describe()`` (called once already: warmed up); name -> the reason it cannot run; the
    PyTorch settings (None without torch). ``say`` gets progress lines and tracebacks.
    """
    say = say or (lambda *a: print(*a, file=sys.stderr))
    peers, unavailable, settings = {}, {}, None
    wants_torch = [n for n in names if n.startswith("torch_")]
    if wants_torch:
        why = torch_cuda_reason(ordinal)
        eager = None
        if why is None:
            from benchmarks._torch_eager import TorchEager

            settings = configure_torch(cudnn_benchmark)
            say(f"peers: PyTorch {settings['torch']} (CUDA {settings['torch_cuda']}, cuDNN "
                f"{settings['cudnn']}), cudnn.benchmark {'on' if cudnn_benchmark else 'off'}")
            try:
                eager = TorchEager(model, feeds, None, device=f"cuda:{ordinal}")
                eager()
            except NotImplementedError as e:
                why = f"unsupported: {e}"
            except Exception as e:  # a peer's failure is reported, not the benchmark's
                why = _failed(e, say)
        if why is not None:
            unavailable.update(dict.fromkeys(wants_torch, why))
        else:
            if "torch_eager" in names:
                peers["torch_eager"] = eager
            if "torch_cuda_graphs" in names:
                try:
                    g = TorchGraphs(eager)
                    g()
                    peers["torch_cuda_graphs"] = g
                except Exception as e:
                    unavailable["torch_cuda_graphs"] = _failed(e, say)
    if "ort_cuda" in names:
        from nnc.models.peers import OrtRun, PeerUnavailableError, ort_version

        if ort_version() is None:
            unavailable["ort_cuda"] = "onnxruntime is not installed"
        else:
            try:
                r = OrtRun(model, feeds, intra_op=1, device=f"cuda:{ordinal}")
                r()
                peers["ort_cuda"] = r
            except PeerUnavailableError as e:
                unavailable["ort_cuda"] = str(e)
            except Exception as e:
                unavailable["ort_cuda"] = _failed(e, say)
    return peers, unavailable, settings
