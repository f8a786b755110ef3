"""Django's AUTH_PASSWORD_VALIDATORS on every path that sets a password: ``manage.py users create
--password-stdin`` (through ``services.user_create``), the admin's add-user and set-password forms, and
``changepassword`` (Django's own). A refused password creates nothing."""
from __future__ import annotations

import io
import sys

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from apps.accounts.models import AuditEvent
from apps.accounts.services import user_create
from apps.core.errors import ValidationFailed

pytestmark = pytest.mark.django_db
STRONG = "violet-anchor-meadow-42"


def _create(monkeypatch, password: str, username: str = "bob") -> str:
    """``users create --password-stdin`` with ``password`` on standard input (a StringIO stands in for the
    terminal; the command reads it as it reads a pipe)."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(password + "\n"))
    out = io.StringIO()
    call_command("users", "create", username, "--email", "bob@example.com", "--password-stdin", stdout=out)
    return out.getvalue()


@pytest.mark.parametrize("weak", ["password", "12345678901", "short", "", "bob@example.com1"])
def test_users_create_refuses_a_password_the_validators_refuse(monkeypatch, weak):
    with pytest.raises(CommandError, match="password_invalid: Choose another password"):
        _create(monkeypatch, weak)
    assert not get_user_model().objects.filter(username="bob").exists()
    assert not AuditEvent.objects.filter(action="user.create").exists()


def test_users_create_sets_a_password_the_validators_accept(monkeypatch):
    assert "created user bob" in _create(monkeypatch, STRONG)
    assert get_user_model().objects.get(username="bob").check_password(STRONG)


def test_the_service_refuses_with_the_code_and_field():
    with pytest.raises(ValidationFailed) as refused:
        user_create(username="carol", password="carol1234")
    assert (refused.value.code, refused.value.field) == ("password_invalid", "password")
    assert user_create(username="dave").has_usable_password() is False  # no password: none set


def test_the_admin_forms_validate_too(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("root", "root@example.com", STRONG))
    response = client.post("/admin/auth/user/add/", {"username": "erin", "password1": "password",
                                                      "password2": "password", "usable_password": "true"})
    assert response.status_code == 200 and not django_user_model.objects.filter(username="erin").exists()
    user = django_user_model.objects.create_user("frank")
    response = client.post(f"/admin/auth/user/{user.pk}/password/", {"password1": "123456789",
                                                                      "password2": "123456789",
                                                                      "usable_password": "true"})
    assert response.status_code == 200 and not django_user_model.objects.get(pk=user.pk).has_usable_password()
    response = client.post(f"/admin/auth/user/{user.pk}/password/", {"password1": STRONG, "password2": STRONG,
                                                                      "usable_password": "true"})
    assert response.status_code == 302 and django_user_model.objects.get(pk=user.pk).check_password(STRONG)
    assert AuditEvent.objects.filter(action="user.password_set", target_id=str(user.pk)).exists()
