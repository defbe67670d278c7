"""Per-GPU power, SM clock and utilisation from NVML every half second, one JSON line a reading, until killed."""

import json
import time

import pynvml

pynvml.nvmlInit()
handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
while True:
    row = {"t": round(time.time(), 3), "gpus": []}
    for i, h in enumerate(handles):
        u = pynvml.nvmlDeviceGetUtilizationRates(h)
        procs = [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
        row["gpus"].append(
            {
                "index": i,
                "power_mw": pynvml.nvmlDeviceGetPowerUsage(h),
                "power_limit_mw": pynvml.nvmlDeviceGetEnforcedPowerLimit(h),
                "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                "sm_clock_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
                "util_gpu": u.gpu,
                "util_mem": u.memory,
                "pids": procs,
            }
        )
    print(json.dumps(row), flush=True)
    time.sleep(0.5)
