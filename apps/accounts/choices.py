from django.db import models


class AuditVia(models.TextChoices):
    API = "api", "API"
    ADMIN = "admin", "Django admin"
    PAGE = "page", "staff page"
    COMMAND = "command", "manage.py command"
