"""CPU preparation: decide what the accelerated step must find, and a nonce that proves the
evaluation reads *this* run's inspection (outputs travel through Host, not a shared disk)."""
import json
import os
import secrets

expected = int(os.environ.get("EXPECTED_GPUS", "1"))
plan = {"expected_gpus": expected, "nonce": secrets.token_hex(8)}
with open(os.environ["FOREST_OUTPUTS_FILE"], "w") as out:
    json.dump(plan, out)
print(f"prepare: expecting {expected} GPU(s), nonce {plan['nonce']}")
