"""Everything that talks to an API server, and an in-memory stand-in for one.

- :mod:`.backend`: the :class:`~.backend.Backend` protocol the extender, webhook and CLI use.
- :mod:`.rest`: :class:`~.rest.KubeClient`, the one client of a real API server (aiohttp; every
  request of the extender, the webhook and the node agent; paths built by one function that quotes
  and validates every segment). lightkube loads the kubeconfig (:mod:`.credentials`), nothing more.
- :mod:`.memory`: :class:`~.memory.MemoryBackend`, objects loaded from a ``--cluster`` YAML file.
- :mod:`.persist`: the cluster file: saved atomically, and read (:func:`~.persist.load_documents`, the one
  reader of cluster files: a JSON document as JSON, the others as YAML).
- :mod:`.store`: the versioned object store with watch history behind the memory backend.
- :mod:`.informer`: :class:`~.informer.Informer`, list + watch (410 re-list, backoff) handing objects to
  handlers (the engine's :class:`~devshare.engine.watched.WatchedCluster`); kube imports nothing of the engine.
- :mod:`.leader`: :class:`~.leader.LeaderElector`, Lease-based leader election.
"""
