"""The kubelet device plugin (API v1beta1, gRPC over unix sockets): one plugin per served resource."""
