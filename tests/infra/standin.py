"""A provider-free stand-in of the Grove module, generated from its HCL, for planning on a real engine.

Every ``resource``/``data`` block of ``infra/modules/grove`` becomes a ``terraform_data`` resource named
``<type>__<name>`` (``data__<type>__<name>`` for data sources) with **the same** ``count``/``for_each``
expression; locals, variables and the provider-free ``config`` submodule are kept as they are. Planning
it shows exactly which resources the real module would plan for given inputs, without the providers
(talos, libvirt, kubernetes, helm) this machine cannot download. Resource bodies, preconditions and
outputs are not carried over: the stand-in answers "which resources", nothing else.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.infra.conftest import INFRA, blocks, hcl_load, locals_of, resources

GROVE = INFRA / "modules" / "grove"


def _single_interpolation(value: str) -> bool:
    """True when ``value`` is exactly one ``${...}`` (not a template such as ``"${a}-${b}"``)."""
    if not (value.startswith("${") and value.endswith("}")):
        return False
    depth = 0
    for index, char in enumerate(value):
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0 and index != len(value) - 1:
                return False
    return True


def expression(value: Any) -> str:
    """python-hcl2's value back to HCL expression text."""
    if isinstance(value, str):
        return value[2:-1] if _single_interpolation(value) else json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ", ".join(expression(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {expression(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {value!r} as HCL")


def standin_address(address: str, *, data: bool = False) -> str:
    kind, name = address.split(".", 1)
    return f"terraform_data.{'data__' if data else ''}{kind}__{name}"


def write_standin(destination: Path) -> Path:
    """Write the stand-in module into ``destination`` (with its own copy of the config submodule)."""
    destination.mkdir(parents=True)
    shutil.copytree(GROVE / "modules", destination / "modules",
                    ignore=shutil.ignore_patterns(".terraform", "*.tfstate*"))
    shutil.copy(GROVE / "variables.tf", destination / "variables.tf")
    lines: list[str] = []
    for path in sorted(GROVE.glob("*.tf")):
        if path.name in ("variables.tf", "outputs.tf", "versions.tf"):
            continue
        document = hcl_load(path)
        local_values = locals_of(document)
        if local_values:
            lines.append("locals {")
            # path.module still means the real module's folder (the in-repo chart is found from it).
            lines += [f"  {name} = {expression(value)}".replace("${path.module}", str(GROVE))
                      for name, value in local_values.items()]
            lines.append("}")
        for name, call in blocks(document, "module").items():
            lines.append(f'module "{name}" {{')
            lines += [f"  {key} = {expression(value)}" if key != "source" else f'  source = "{value}"'
                      for key, value in call.items() if key not in ("depends_on", "providers")]
            lines.append("}")
        for kind in ("resource", "data"):
            for address, body in resources(document, kind).items():
                standin_name = standin_address(address, data=kind == "data").split(".", 1)[1]
                lines.append(f'resource "terraform_data" "{standin_name}" {{')
                for meta in ("count", "for_each"):
                    if meta in body:
                        lines.append(f"  {meta} = {expression(body[meta])}")
                lines.append(f'  input = "{address}"')
                lines.append("}")
    (destination / "main.tf").write_text("\n".join(lines) + "\n")
    return destination


def declared_addresses(*names: str) -> set[str]:
    """Stand-in addresses of every resource and data block declared in the named module files."""
    found: set[str] = set()
    for name in names:
        document = hcl_load(GROVE / name)
        found |= {standin_address(a) for a in resources(document)}
        found |= {standin_address(a, data=True) for a in resources(document, "data")}
    return found
