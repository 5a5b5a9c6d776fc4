"""Layer 7 top. Whole-network graphs built from nnc commands, for demos, benchmarks and
end-to-end tests."""

from nnc.models.inception import (
    InceptionV3,
    build_inception_v3,
    build_inception_v3_model,
    reference_forward,
)

__all__ = [
    "InceptionV3",
    "build_inception_v3",
    "build_inception_v3_model",
    "reference_forward",
]
