"""The sigmoid parameters the paper publishes: App. A.13, Table 1 (arXiv 2510.13786).

"C_mid, B, and A values for the large scale runs in Section 5", compute in GB200 GPU-hours.
Used as ground truth for synthetic curves (tests, benchmarks, bundled examples) and as a
reference point for users comparing their own fits.
"""

from __future__ import annotations

from typing import NamedTuple


class PaperFit(NamedTuple):
    name: str
    C_mid: float  # GPU-hours
    B: float
    A: float


TABLE1: tuple[PaperFit, ...] = (
    PaperFit("ScaleRL", 2542.0, 1.92, 0.610),
    PaperFit("ScaleRL-32k", 11272.0, 1.89, 0.645),
    PaperFit("ScaleRL-8gen", 2542.0, 2.44, 0.585),
    PaperFit("ScaleRL-24gen", 3054.0, 2.22, 0.590),
    PaperFit("ScaleRL-32gen", 2936.0, 2.07, 0.595),
    PaperFit("ScaleRL-Scout", 4242.0, 1.65, 0.710),
    PaperFit("ScaleRL-bs512", 2818.0, 1.77, 0.605),
    PaperFit("ScaleRL-bs2048", 10909.0, 1.70, 0.645),
    PaperFit("ScaleRL-math+code-math", 2896.0, 2.05, 0.595),
    PaperFit("ScaleRL-math+code-code", 1675.0, 1.09, 0.615),
)
