"""devshare: fine-grained GPU and device-sharing scheduler for Kubernetes."""

__version__ = "0.1.0"
