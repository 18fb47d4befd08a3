"""The CUDA backend's device allocations: out of memory is one sentence with the sizes.

No GPU here: the driver is a stand-in with PyCUDA's interface (`mem_alloc`, its
`MemoryError`, `mem_get_info`) for a device with 1 MiB free of 80 GiB.
"""

from __future__ import annotations

import pytest

from gradfuse.backend.cuda.memory import device_alloc, human
from gradfuse.diagnostics import GradfuseError


class NearlyFullDevice:
    class MemoryError(Exception):  # pycuda.driver.MemoryError
        pass

    def __init__(self) -> None:
        self.allocated: list[int] = []

    def mem_alloc(self, nbytes: int) -> int:
        if nbytes > 1 << 20:
            raise self.MemoryError("cuMemAlloc failed: out of memory")
        self.allocated.append(nbytes)
        return 0x7000_0000 + sum(self.allocated)

    def mem_get_info(self) -> tuple[int, int]:
        return 1 << 20, 80 << 30


def test_sizes_read_as_people_write_them():
    assert [human(n) for n in (0, 512, 1536, 3 << 20, 80 << 30)] == [
        "0 B", "512 B", "1.5 KiB", "3.0 MiB", "80.0 GiB",
    ]  # fmt: skip


def test_an_allocation_that_fits_is_made_and_an_empty_one_takes_a_byte():
    drv = NearlyFullDevice()
    device_alloc(drv, 4096, 'param "w"')
    device_alloc(drv, 0, "argument 0")
    assert drv.allocated == [4096, 1]


def test_out_of_memory_names_what_asked_how_much_and_what_is_free():
    with pytest.raises(GradfuseError) as err:
        device_alloc(NearlyFullDevice(), 3 << 30, 'param "fc.weight"')
    assert str(err.value).endswith(
        'the GPU is out of memory: param "fc.weight" needs 3.0 GiB, and 1.0 MiB of 80.0 GiB'
        " are free"
    )
    assert err.value.__cause__ is None  # one error, not the driver's traceback under it
