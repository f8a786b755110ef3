"""Groves: enrollment, credentials, heartbeats, and the latest capacity each Grove reports.

Owns the Grove registry, placement units and accelerator inventory items as reported, staleness, and
the enrollment/heartbeat half of the wire API. Reports describe capacity; they never measure usage.
"""
