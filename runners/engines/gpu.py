"""GPU memory per device through nvidia-ml-py (NVML). Without a GPU or driver: a clean skip."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GPUMemory:
    """One GPU's memory in use: its NVML device ``index`` and ``used_bytes`` (bytes)."""

    index: int
    used_bytes: int


class GPUMonitor:
    """Reads the memory in use on each visible GPU; ``available`` is False where NVML is absent
    (not installed, no driver, no GPU), and :meth:`read` then returns nothing."""

    def __init__(self) -> None:
        self.available = False
        self._handles: list[Any] = []
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            self.available = bool(self._handles)
        except Exception:  # ImportError, NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded, ...
            pass

    def read(self) -> list[GPUMemory]:
        """Each visible GPU's memory in use now; empty where NVML is absent."""
        if not self.available:
            return []
        readings = []
        for index, handle in enumerate(self._handles):
            info = self._nvml.nvmlDeviceGetMemoryInfo(handle)
            readings.append(GPUMemory(index, int(info.used)))
        return readings

    def close(self) -> None:
        """Shut NVML down (once); later reads return nothing."""
        if self.available:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
            self.available = False
