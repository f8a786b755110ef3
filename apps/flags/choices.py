from django.db import models


class FlagScope(models.TextChoices):
    GLOBAL = "global", "Global"
    ENVIRONMENT = "environment", "Environment"
    TEAM = "team", "Team"


# Most specific first: a team override beats an environment override beats a global one.
SCOPE_PRECEDENCE = (FlagScope.TEAM, FlagScope.ENVIRONMENT, FlagScope.GLOBAL)
