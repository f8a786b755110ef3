"""CPU evaluation of what the accelerated step wrote: same run (nonce), the expected number of GPUs,
and the tool's view (`nvidia-smi -L`) agreeing with the driver's (/proc/driver/nvidia/gpus)."""
import json
import os
import sys

needs = json.loads(os.environ.get("FOREST_NEEDS_OUTPUTS", "{}"))
seen = needs.get("inspect") or {}
plan = needs.get("prepare") or {}
problems = []
if not seen:
    problems.append("the inspect step reported no outputs")
if seen.get("nonce") != plan.get("nonce"):
    problems.append(f"inspect saw nonce {seen.get('nonce')!r}, prepare made {plan.get('nonce')!r}")
listed, driver = seen.get("nvidia_smi") or [], seen.get("proc_gpus") or []
expected = plan.get("expected_gpus", 1)
if len(listed) != expected:
    problems.append(f"nvidia-smi -L lists {len(listed)} GPU(s), {expected} expected")
if len(driver) != len(listed):
    problems.append(f"nvidia-smi -L lists {len(listed)} GPU(s) but /proc/driver/nvidia/gpus shows {len(driver)}")
listed_uuids = {line.rsplit("UUID: ", 1)[-1].rstrip(")") for line in listed if "UUID: " in line}
driver_uuids = {d.get("uuid") for d in driver if d.get("uuid")}
if driver_uuids and listed_uuids != driver_uuids:
    problems.append(f"GPU UUIDs differ: nvidia-smi {sorted(listed_uuids)}, driver {sorted(driver_uuids)}")
if problems:
    sys.exit("evaluate: FAILED: " + "; ".join(problems))
print(f"evaluate: OK: {len(listed)} GPU(s), tool and driver agree: " + ", ".join(listed))
