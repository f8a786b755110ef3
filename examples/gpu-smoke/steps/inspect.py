"""Accelerated step: look at the device without CUDA. `nvidia-smi -L` (injected by the NVIDIA
container runtime with NVIDIA_DRIVER_CAPABILITIES=utility) and the driver's own view in
/proc/driver/nvidia/gpus/*/information. Fails when neither shows a GPU."""
import glob
import json
import os
import subprocess
import sys

needs = json.loads(os.environ.get("FOREST_NEEDS_OUTPUTS", "{}"))
listed: list[str] = []
try:
    done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    listed = [line.strip() for line in done.stdout.splitlines() if line.startswith("GPU ")]
    smi_error = "" if done.returncode == 0 else (done.stderr.strip() or f"exit {done.returncode}")
except (OSError, subprocess.TimeoutExpired) as exc:
    smi_error = str(exc)
driver: list[dict[str, str]] = []
for path in sorted(glob.glob("/proc/driver/nvidia/gpus/*/information")):
    fields = {}
    with open(path) as handle:
        for line in handle:
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    driver.append({"bus": path.split("/")[-2], "model": fields.get("Model", ""), "uuid": fields.get("GPU UUID", "")})
report = {"nonce": needs.get("prepare", {}).get("nonce"), "nvidia_smi": listed, "nvidia_smi_error": smi_error,
          "proc_gpus": driver, "visible_devices": os.environ.get("NVIDIA_VISIBLE_DEVICES", "")}
with open(os.environ["FOREST_OUTPUTS_FILE"], "w") as out:
    json.dump(report, out)
print("\n".join(listed) or f"nvidia-smi -L listed nothing ({smi_error or 'no output'})")
print(f"/proc/driver/nvidia/gpus: {len(driver)} device(s)")
if not listed and not driver:
    sys.exit("inspect: no GPU visible to this step (no nvidia-smi devices, no /proc/driver/nvidia/gpus)")
