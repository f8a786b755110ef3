"""``TextChoices`` for ingress models, derived from ``vocabulary``."""
from apps.core.choices import text_choices
from apps.ingress import vocabulary

RouteState = text_choices(vocabulary.RouteState)
