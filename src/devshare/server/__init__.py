"""HTTP services around the engine: the admission webhook and the scheduler extender."""
