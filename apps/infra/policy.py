"""Loading ``infra/policy/``: the apply policy and the state authority, validated against their schemas.

Pure: takes paths, returns frozen dataclasses, raises ``InfraRefusal`` with a stable code. The YAML
files are the reviewed source of truth; nothing here writes them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from apps.infra.exceptions import InfraRefusal

APPLY_POLICY_FILE = "apply-policy.yaml"
STATE_AUTHORITY_FILE = "state-authority.yaml"
APPLY_POLICY_SCHEMA = "apply-policy.schema.json"
STATE_AUTHORITY_SCHEMA = "state-authority.schema.json"

MODE_PLAN_ONLY = "plan-only"
MODE_APPLY = "apply"


@dataclass(frozen=True)
class ApplyPolicyRow:
    """Who may run an environment, whether apply is allowed, and how much one apply may change."""

    environment: str
    host: str
    mode: str
    max_creates: int
    max_updates: int
    max_destroys: int
    note: str = ""


@dataclass(frozen=True)
class StateAuthorityEntry:
    """Which host holds an environment's state, and where."""

    environment: str
    host: str
    backend: str
    location: str
    note: str = ""


@dataclass(frozen=True)
class InfraPolicy:
    """Both policy files, indexed by environment."""

    apply_policy: dict[str, ApplyPolicyRow]
    state_authority: dict[str, StateAuthorityEntry]


def _document_load(*, path: Path, schema_path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise InfraRefusal("infra.policy_invalid", f"{path} is missing; infra/policy/ must hold it.")
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise InfraRefusal("infra.policy_invalid", f"{path} is not valid YAML: {error}") from error
    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(document), key=lambda error: list(error.absolute_path))
    if errors:
        first = errors[0]
        where = ".".join(str(part) for part in first.absolute_path) or "(document)"
        raise InfraRefusal(
            "infra.policy_invalid",
            f"{path} does not match {schema_path.name} at {where}: {first.message}",
            field=where,
        )
    return document


def _unique_by_environment(rows: Iterable[dict[str, Any]], *, path: Path) -> dict[str, dict[str, Any]]:
    # YAML would let a later duplicate silently win; a duplicated environment is a review mistake.
    indexed: dict[str, dict[str, Any]] = {}
    for row in rows:
        name = row["environment"]
        if name in indexed:
            raise InfraRefusal("infra.policy_invalid", f"{path} lists environment {name} twice; keep one row.")
        indexed[name] = row
    return indexed


def policy_load(*, policy_dir: Path, schema_dir: Path) -> InfraPolicy:
    """Read and validate ``apply-policy.yaml`` and ``state-authority.yaml`` from ``policy_dir``."""
    apply_path = policy_dir / APPLY_POLICY_FILE
    authority_path = policy_dir / STATE_AUTHORITY_FILE
    apply_document = _document_load(path=apply_path, schema_path=schema_dir / APPLY_POLICY_SCHEMA)
    authority_document = _document_load(path=authority_path, schema_path=schema_dir / STATE_AUTHORITY_SCHEMA)
    apply_rows = _unique_by_environment(apply_document["environments"], path=apply_path)
    authority_rows = _unique_by_environment(authority_document["environments"], path=authority_path)
    return InfraPolicy(
        apply_policy={name: ApplyPolicyRow(**row) for name, row in apply_rows.items()},
        state_authority={name: StateAuthorityEntry(**row) for name, row in authority_rows.items()},
    )
