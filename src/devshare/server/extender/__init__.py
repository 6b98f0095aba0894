"""The scheduler extender: kube-scheduler's ``k8s.io/kube-scheduler/extender/v1`` protocol over HTTP.

- :mod:`.wire`: the protocol's types (msgspec; PascalCase on the wire, any case accepted);
- :mod:`.service`: the verbs over the engine (filter, prioritize, bind with reserve/undo, groups and
  gangs through the engine's GroupPlanner, expiry);
- :mod:`.nodeset`: candidate node lists cached by their bytes, prioritize answers encoded per row;
- :mod:`.verdicts`: filter and prioritize answers from one engine evaluation;
- :mod:`.preempt`: the fewest victims a pod needs on each node;
- :mod:`.metrics`: Prometheus metrics;
- :mod:`.app`: the aiohttp application (the verbs, /inspect, /metrics, /healthz, /readyz);
- :mod:`.serve`: wiring to a backend (state sync, leader election, expiry) and running it.
"""
