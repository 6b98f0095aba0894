"""The webhook refuses pods asking for absurd amounts (issue 12), with the maximum in the reason."""

from __future__ import annotations

import pytest

from support.webhook_client import Client
from support.webhook_pods import pod

ABSURD = [
    ({"nvidia.com/gpu": "100000000000"}, "at most 1024 devices"),
    ({"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory": "9999999Ei"}, "at most 1Pi"),
    ({"aliyun.com/gpu-mem": "1e18"}, "at most"),
    ({"koordinator.sh/gpu": "50", "cpu": "1e30"}, "at most 65536 cores"),
]


@pytest.mark.parametrize(("resources", "words"), ABSURD, ids=[w for _, w in ABSURD])
def test_absurd_quantities_are_refused(client: Client, resources: dict[str, str], words: str) -> None:
    response = client.review("/validate", pod(resources))  # /mutate never refuses: validation does
    assert response["allowed"] is False, response
    assert words in response["status"]["message"], response
