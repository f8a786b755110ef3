"""Placement: what work needs (``ExecutionRequirement``), whether a Grove can run it (the compatibility
checker), which Grove gets it (``place_execution``), and the persisted, explained decision
(``ExecutionPlacement``). Accelerator admission and policy live in ``apps.accelerators``.
"""
