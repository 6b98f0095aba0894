from __future__ import annotations

from pathlib import Path

import pytest

NODES = """sn,cpu_milli,memory_mib,gpu,model
n0,32000,131072,2,T4
n1,32000,131072,2,T4
n2,64000,262144,4,V100
n3,96000,393216,8,G2
n4,16000,65536,1,P100
"""

PODS_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
               "deletion_time,scheduled_time\n")


def pods_csv() -> str:
    rows = []
    shapes = [(4000, 8192, 1, 500, ""), (8000, 16384, 1, 1000, ""), (2000, 4096, 0, 0, ""),
              (6000, 12288, 1, 250, "T4"), (16000, 32768, 2, 1000, ""), (4000, 8192, 1, 750, "V100|G2")]
    for i in range(20):
        cpu, mem, n, milli, spec = shapes[i % len(shapes)]
        rows.append(f"p{i:03d},{cpu},{mem},{n},{milli},{spec},LS,Running,0,0,0\n")
    return PODS_HEADER + "".join(rows)


@pytest.fixture
def small_trace(tmp_path: Path) -> tuple[Path, Path]:
    nodes = tmp_path / "nodes.csv"
    pods = tmp_path / "openb_pod_list_small.csv"
    nodes.write_text(NODES)
    pods.write_text(pods_csv())
    return nodes, pods
