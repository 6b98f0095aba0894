"""The scheduler extender: kube-scheduler's ``k8s.io/kube-scheduler/extender/v1`` protocol over HTTP.

- :mod:`.wire`: the protocol's types (msgspec; PascalCase on the wire, any case accepted);
- :mod:`.app`: the aiohttp application (the verbs, /inspect, /ui, /metrics, /healthz, /readyz);
- :mod:`.extender`: :class:`~.extender.Extender`, the verbs wired to the parts that own them:
  :mod:`.requests` (a verb's pod and candidates, and their caches), :mod:`.filtering` (filter and
  prioritize, with holds), :mod:`.binding` (the bind path: reserve, claim, Binding), :mod:`.preemption`,
  :mod:`.groups` (members that exist, gang members to bind again), :mod:`.requeue`;
- :mod:`.view`: what those parts read of the world (:class:`~.view.ClusterView`, :class:`~.view.Leadership`);
- :mod:`.claims` and :mod:`.claimsweep`: the claim ledger's writes and upkeep (several replicas);
- :mod:`.nodeset`, :mod:`.verdicts`, :mod:`.shortlist`, :mod:`.scores`: answers over thousands of nodes;
- :mod:`.metrics`, :mod:`.collectors`, :mod:`.occupancy`, :mod:`.events`: what it tells people;
- the read surface: :mod:`.snapshot` (/ui/occupancy and /inspect from one snapshot per interval),
  :mod:`.page` (the page's queue, quotas, configuration), :mod:`.refused` (the pods refused lately, and
  why), :mod:`.history` (allocation and stranded % over the last hour);
- :mod:`.steering`: the leader's steering taint on the Nodes holding a free GPU (other schedulers' pods
  go elsewhere; ``scheduling.steerOtherPods``);
- :mod:`.serve`: wiring to a backend (engine, informer, leader election, upkeep) and running it.
"""
