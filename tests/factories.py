"""Factories for test data. Capacity bodies follow the wire contract (docs/wire.md) exactly."""
from __future__ import annotations

import factory
from django.contrib.auth import get_user_model

GIB = 1024**3


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    is_staff = True


def unit(unit_id: str = "machine", cpu: int = 8000, mem_gib: int = 32, accelerators: list | None = None,
         free_cpu: int | None = None, free_mem_gib: int | None = None) -> dict:
    return {
        "id": unit_id,
        "cpu_milli": {"allocatable": cpu, "free": cpu if free_cpu is None else free_cpu},
        "memory_bytes": {"allocatable": mem_gib * GIB,
                         "free": (mem_gib if free_mem_gib is None else free_mem_gib) * GIB},
        "accelerators": accelerators or [],
    }


def nvidia_gpu(inventory_id: str = "GPU-0", memory_gib: int = 80, model: str = "NVIDIA H100 80GB HBM3") -> dict:
    return {"id": inventory_id, "kind": "gpu", "vendor": "nvidia", "model": model, "apis": ["cuda"],
            "memory_bytes": memory_gib * GIB, "memory_kind": "dedicated", "memory_enforced": True,
            "share_mode": "exclusive"}


def apple_gpu(inventory_id: str = "apple-gpu-0", memory_gib: int = 48) -> dict:
    return {"id": inventory_id, "kind": "gpu", "vendor": "apple", "model": "Apple M3 Max", "apis": ["metal"],
            "memory_bytes": memory_gib * GIB, "memory_kind": "unified", "memory_enforced": False,
            "share_mode": "cooperative"}


def heartbeat_body(*, substrate: str = "native", gpus: int = 0, version: str = "forest-agent 0.1.0",
                   change_kinds: list[str] | None = None, log_tail: list[str] | None = None) -> dict:
    accelerators = [nvidia_gpu(f"GPU-{i}") for i in range(gpus)]
    slots = [{"inventory_id": a["id"], "allocatable": 1, "free": 1} for a in accelerators]
    if change_kinds is None:
        change_kinds = ["native.job"] if substrate == "native" else ["k8s.job", "k8s.build_job"]
    return {
        "version": version,
        "change_kinds": change_kinds,
        "isolation": ["host_process"] if substrate == "native" else ["container"],
        "capacity": {"placement_units": [unit(accelerators=slots)], "accelerators": accelerators},
        "log_tail": log_tail or [],
    }


def api_token_for(user, name: str = "test") -> str:
    """A real hashed API token for ``user`` (``Authorization: Token <value>``)."""
    from apps.accounts.services import api_token_create

    return api_token_create(user=user, name=name)[1]


def grant(user, *roles: str, teams: tuple[str, ...] = ()):
    """Give ``user`` roles (Django groups) and team memberships, as ``manage.py roles/teams`` would."""
    from apps.accounts.services import role_grant, team_member_set

    for role in roles:
        role_grant(username=user.get_username(), role=role)
    for team in teams:
        team_member_set(slug=team, username=user.get_username(), member=True)
    user.refresh_from_db()
    return user


def entitlement(*, team: str, api: str = "", vendor: str = "", max_concurrent: int | None = None,
                budget_accelerator_seconds: int | None = None, period: str = "month"):
    """A team's accelerator entitlement, validated as the admin (where staff set them) validates it."""
    from apps.accelerators.models import AcceleratorEntitlement

    row = AcceleratorEntitlement.objects.filter(team=team, api=api, vendor=vendor).first() or \
        AcceleratorEntitlement(team=team, api=api, vendor=vendor)
    row.max_concurrent, row.budget_accelerator_seconds, row.period = max_concurrent, budget_accelerator_seconds, period
    row.full_clean()
    row.save()
    return row
