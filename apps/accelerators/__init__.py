"""Accelerators: admission of accelerator requests against reported placement units, serialised
Host-side claims, and the policy behind ``host.accelerators.policy`` (entitlements, usage ledger,
concurrency and budgets in accelerator-seconds, enforced by a beat task).
"""
