"""Everything that talks to an API server, and an in-memory stand-in for one.

- :mod:`.backend`: the :class:`~.backend.Backend` protocol the extender, webhook and CLI use.
- :mod:`.live`: :class:`~.live.LiveBackend`, a real API server through lightkube (the only module
  that imports lightkube, with :mod:`.rest`, which takes lightkube's connection settings for the hot
  requests: watches through aiohttp, the small requests over :mod:`.http1`'s kept-alive connections).
- :mod:`.memory`: :class:`~.memory.MemoryBackend`, objects loaded from a ``--cluster`` YAML file.
- :mod:`.store`: the versioned object store with watch history behind the memory backend.
- :mod:`.sync`: :class:`~.sync.StateSync`, list + watch feeding the engine's ClusterState.
- :mod:`.leader`: :class:`~.leader.LeaderElector`, Lease-based leader election.
"""
