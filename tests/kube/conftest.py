from fakeapi.plugin import fake_api, fake_kubeconfig, live_backend  # noqa: F401
