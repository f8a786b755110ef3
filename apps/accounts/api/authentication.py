"""``Authorization: Token fat_<key id>.<secret>`` for staff, CI, the CLI and MCP: hashed, expiring,
revocable tokens (``apps.accounts.models.ApiToken``). A token acts as its user."""
from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication, get_authorization_header

from apps.accounts.services import api_token_authenticate
from apps.core.errors import NotAuthenticated


class ApiTokenAuthentication(BaseAuthentication):
    keyword = b"token"

    def authenticate(self, request):
        header = get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword:
            return None
        if len(header) != 2:
            raise NotAuthenticated("authentication_failed", "Send 'Authorization: Token <key>'.")
        token = api_token_authenticate(presented=header[1].decode("latin-1"))
        return (token.user, token)

    def authenticate_header(self, request):
        return 'Token realm="forest"'


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = ApiTokenAuthentication
    name = "apiToken"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "Authorization",
                "description": "'Token <key>'; make one with 'manage.py api_token create USER --name CLIENT'."}
