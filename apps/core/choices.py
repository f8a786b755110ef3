"""Django ``TextChoices`` derived from the stdlib vocabulary enums, so each value is written once."""
from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from django.db import models


def text_choices(vocabulary: type[StrEnum], labels: Mapping[str, str] | None = None) -> type[models.TextChoices]:
    """A ``TextChoices`` with the same members and values as ``vocabulary``; a label is the value in words
    ("time_sliced" -> "Time sliced") unless ``labels`` says otherwise."""
    labels = labels or {}
    members = [(m.name, (m.value, labels.get(m.value, m.value.replace("_", " ").capitalize())))
               for m in vocabulary]
    return models.TextChoices(vocabulary.__name__, members)
