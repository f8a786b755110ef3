"""Artifacts: what work produces and consumes, where its bytes live (``storage_kind``), and the
content-addressed store (CAS) that serves native bundles to agents, verified by digest."""
