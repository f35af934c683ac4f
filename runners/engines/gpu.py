"""GPU memory per device through nvidia-ml-py (NVML). Without a GPU or driver: a clean skip."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GPUMemory:
    index: int
    used_bytes: int
    total_bytes: int


class GPUMonitor:
    """Reads used/total memory of each visible GPU; ``available`` is False where NVML is absent."""

    def __init__(self) -> None:
        self.available = False
        self.reason = ""
        self._handles: list = []
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            self.available = bool(self._handles)
            self.reason = "" if self.available else "no GPU visible to NVML"
        except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded, ...
            self.reason = f"GPU memory not sampled: {type(exc).__name__}: {exc}"

    def read(self) -> list[GPUMemory]:
        if not self.available:
            return []
        readings = []
        for index, handle in enumerate(self._handles):
            info = self._nvml.nvmlDeviceGetMemoryInfo(handle)
            readings.append(GPUMemory(index, int(info.used), int(info.total)))
        return readings

    def close(self) -> None:
        if self.available:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
            self.available = False
