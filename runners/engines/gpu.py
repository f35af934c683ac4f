"""GPU memory in use through nvidia-ml-py (NVML). Without a GPU or driver: a clean skip."""

from __future__ import annotations

from typing import Any


class GPUMonitor:
    """Reads the memory in use on the visible GPUs; ``available`` is False where NVML is absent
    (not installed, no driver, no GPU), and :meth:`used_bytes` then returns None."""

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

    def used_bytes(self) -> int | None:
        """The memory in use now summed over every visible GPU (bytes); None where NVML is absent."""
        if not self.available:
            return None
        return sum(int(self._nvml.nvmlDeviceGetMemoryInfo(handle).used) for handle in self._handles)

    def close(self) -> None:
        """Shut NVML down (once); later reads return None."""
        if self.available:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
            self.available = False
