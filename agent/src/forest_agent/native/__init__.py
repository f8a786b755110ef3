"""Native execution on this machine: jobs (`jobs`, `journal`), workloads (`bundles`, `extract`,
`signing`, `generations`, `supervisor`, `probes`, `secrets`, `nginx`, `workloads`).

Each lifecycle is an explicit state machine in its own `*_states` module.
"""
