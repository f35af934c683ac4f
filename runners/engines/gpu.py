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


def _cpu_model() -> str | None:
    """The CPU's model name from /proc/cpuinfo (Linux); None elsewhere."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip() or None
    except OSError:
        return None
    return None


def _ray_node_id() -> str | None:
    """The Ray node this process runs on, when it is a Ray worker or driver (ray already
    imported and initialised); None otherwise. Never imports ray."""
    import sys

    ray = sys.modules.get("ray")
    try:
        if ray is not None and ray.is_initialized():
            return str(ray.get_runtime_context().get_node_id())
    except Exception:
        return None
    return None


def host_record(devices: list[str] | None = None) -> dict[str, Any]:
    """Where a run's servers ran, for its engine.json (``host``): ``hostname``, ``ray_node_id``
    (None outside Ray), ``cpu`` (model name), ``gpus`` (``[{index, name, driver}]`` of the GPUs
    in ``devices``, CUDA_VISIBLE_DEVICES values such as ``['0', '1,2']``, or every GPU when None;
    empty without NVML) and ``hardware``: one line naming the GPU models (or the CPU), which a
    study compares across the members of a seed."""
    import socket

    gpus: list[dict[str, Any]] = []
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            driver = pynvml.nvmlSystemGetDriverVersion()
            driver = driver.decode() if isinstance(driver, bytes) else str(driver)
            count = pynvml.nvmlDeviceGetCount()
            wanted = (
                [int(i) for part in devices for i in part.split(",") if i.strip().isdigit()]
                if devices
                else list(range(count))
            )
            for index in wanted:
                if 0 <= index < count:
                    name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(index))
                    gpus.append(
                        {
                            "index": index,
                            "name": name.decode() if isinstance(name, bytes) else str(name),
                            "driver": driver,
                        }
                    )
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML, no driver, no GPU: the CPU describes the machine
        gpus = []
    cpu = _cpu_model()
    if gpus:
        names: dict[str, int] = {}
        for gpu in gpus:
            names[gpu["name"]] = names.get(gpu["name"], 0) + 1
        hardware = ", ".join(f"{n} x {name}" for name, n in names.items()) + f" (driver {gpus[0]['driver']})"
    else:
        hardware = f"CPU: {cpu or 'unknown'}"
    return {
        "hostname": socket.gethostname(),
        "ray_node_id": _ray_node_id(),
        "cpu": cpu,
        "gpus": gpus,
        "hardware": hardware,
    }
