"""HAMi's and Volcano's device list (``UUID,TYPE,MEMORY_MIB,CORES:`` per device, containers split by
``;``): both spellings written, read back, and every malformed entry reported, not dropped silently."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from devshare.model.codecs.vgpu import VgpuDevice, card_uuid, decode_containers, encode_container, encode_containers

A = VgpuDevice(uuid="GPU-a", memory_mib=3000, cores=30)
B = VgpuDevice(uuid="GPU-b", type="Tesla", memory_mib=8000, cores=0)


def test_hami_ends_every_container_volcano_joins_them() -> None:
    assert encode_container([A, B]) == "GPU-a,NVIDIA,3000,30:GPU-b,Tesla,8000,0:"
    assert encode_containers([[A], [], [B]], trailing=True) == "GPU-a,NVIDIA,3000,30:;;GPU-b,Tesla,8000,0:;"
    assert encode_containers([[A], [], [B]], trailing=False) == "GPU-a,NVIDIA,3000,30:;;GPU-b,Tesla,8000,0:"


def test_hamis_own_example_reads() -> None:
    """The example in HAMi's pkg/device/devices.go comment (v2.10.0), with the UUIDs shortened."""
    devices, problems = decode_containers("GPU-0c6c,NVIDIA,3000,30:;;GPU-7f64,NVIDIA,8000,0:GPU-9858,NVIDIA,8000,0:;")
    assert problems == []
    assert [[d.uuid for d in c] for c in devices] == [["GPU-0c6c"], [], ["GPU-7f64", "GPU-9858"]]
    assert devices[0][0] == VgpuDevice(uuid="GPU-0c6c", memory_mib=3000, cores=30)


safe = st.text(st.characters(codec="ascii", categories=["L", "N"], include_characters="-[]."), min_size=1,
               max_size=12)
device = st.builds(VgpuDevice, uuid=safe, type=safe, memory_mib=st.integers(0, 10**7), cores=st.integers(0, 100))
containers = st.lists(st.lists(device, max_size=3), min_size=1, max_size=4)


@given(containers)
def test_hamis_spelling_round_trips(cs: list[list[VgpuDevice]]) -> None:
    assert decode_containers(encode_containers(cs, trailing=True)) == (cs, [])


@given(containers.filter(lambda cs: bool(cs[-1])))
def test_volcanos_spelling_round_trips_when_the_last_container_has_devices(cs: list[list[VgpuDevice]]) -> None:
    """Volcano's last container, when empty, leaves no trace (``a:;`` reads as HAMi's one container):
    its writers list app containers asking for devices, so the last one is never empty."""
    assert decode_containers(encode_containers(cs, trailing=False)) == (cs, [])


def test_malformed_entries_are_reported_and_left_out() -> None:
    devices, problems = decode_containers("GPU-a,NVIDIA,3000:GPU-b,NVIDIA,lots,20:,NVIDIA,1,1:GPU-c,NVIDIA,1,-1:"
                                          "GPU-d,NVIDIA,10,5:;")
    assert devices == [[VgpuDevice(uuid="GPU-d", memory_mib=10, cores=5)]]
    assert problems == [
        "container entry 0: 'GPU-a,NVIDIA,3000' is not UUID,TYPE,MEMORY,CORES",
        "container entry 0: 'GPU-b,NVIDIA,lots,20': memory (MiB) and cores (percent) must be whole numbers >= 0",
        "container entry 0: ',NVIDIA,1,1' is not UUID,TYPE,MEMORY,CORES",
        "container entry 0: 'GPU-c,NVIDIA,1,-1': memory (MiB) and cores (percent) must be whole numbers >= 0",
    ]


def test_card_uuid_names_the_physical_card() -> None:
    assert card_uuid("GPU-x[1g.10gb-0]") == "GPU-x"
    assert card_uuid("GPU-x::3") == "GPU-x"
    assert card_uuid("GPU-x") == "GPU-x"
