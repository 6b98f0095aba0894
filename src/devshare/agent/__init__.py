"""The node agent: discovers devices (NVML or a fake file), reports them (Device object, node
extended resources, kubelet checkpoint), and serves the kubelet device plugin API so that each
container gets exactly the devices the scheduler gave it."""
