"""Builders and helpers shared by every test folder, one module per subject:

- :mod:`.cluster`: engine states, nodes and pods (``ClusterState`` builders)
- :mod:`.allocations`: allocations for the codec tests (hypothesis strategies, one GPU grant)
- :mod:`.extender`: cluster objects, a flaky backend, a running extender and its HTTP verbs
- :mod:`.kube`: v1 Node, Pod and Device objects for the backends
- :mod:`.agent`: the node agent's fake inventories and pods
- :mod:`.webhook_client`, :mod:`.webhook_pods`: the webhook's HTTPS client and example pods
- :mod:`.trace`: a small openb trace
- :mod:`.certs`, :mod:`.server`: certificates, a server run on a thread
- :mod:`.imports`: a package made to look uninstalled

Tests mirror ``src/devshare``: the test of ``src/devshare/<package>/<module>.py`` is
``tests/<package>/test_<module>.py`` (more aspects of one module: ``test_<module>_<aspect>.py``).
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the repository root (examples/, deploy/, README.md)
