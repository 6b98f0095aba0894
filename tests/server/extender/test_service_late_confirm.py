"""A bind whose API response comes back after the watch already saw the pod bound and finished
must not record the pod again: a finished pod's devices stay free (found by tests/e2e)."""

from __future__ import annotations

from typing import Any

from support.extender import bind, cluster, pod, running, settle


async def test_finished_before_the_bind_answer_stays_released() -> None:
    backend = cluster(1, gpus=1, pods=[pod("b", gpus=1)])
    async with running(backend) as (client, runtime):
        real_bind = backend.bind_pod

        async def bind_then_finish(namespace: str, name: str, node_name: str, **kw: Any) -> None:
            await real_bind(namespace, name, node_name, **kw)
            # before the Binding's answer reaches the extender, the pod runs and finishes
            backend.store.patch("pods", f"{namespace}/{name}", {"status": {"phase": "Succeeded"}})
            await settle(runtime, backend)

        backend.bind_pod = bind_then_finish  # type: ignore[method-assign]
        assert await bind(client, "b", "node-0") == ""
        await settle(runtime, backend)
        assert "default/b" not in runtime.state.pods
        r = await client.get("/inspect")
        assert [d["pods"] for n in (await r.json())["nodes"] for d in n["devices"]] == [[]]
