"""Filter parts shared by every app's filtersets (API and staff pages use the same ones).

django-filter's ``BooleanFilter`` reads an unrecognised value ("bogus") as "no filter" and offers
"Unknown" as its empty choice; ``YesNoFilter`` refuses the value with a visible error instead, and
offers "any / yes / no".
"""
from __future__ import annotations

from datetime import UTC

import django_filters
from django import forms
from django.core.exceptions import ValidationError
from django_filters.fields import IsoDateTimeField

TRUE = {"true", "1", "yes", "on"}
FALSE = {"false", "0", "no", "off"}
YES_NO_CHOICES = [("", "any"), ("true", "yes"), ("false", "no")]


class YesNoField(forms.Field):
    widget = forms.Select(choices=YES_NO_CHOICES)

    def to_python(self, value):
        if value in (None, ""):
            return None
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in TRUE:
            return True
        if text in FALSE:
            return False
        raise ValidationError("'%(value)s' is not a yes/no value: use true or false.", code="invalid_choice",
                              params={"value": value})

    def validate(self, value):
        if value is None and self.required:
            raise ValidationError(self.error_messages["required"], code="required")


class YesNoFilter(django_filters.BooleanFilter):
    field_class = YesNoField


class UtcIsoDateTimeField(IsoDateTimeField):
    """An ISO 8601 moment normalised to UTC: PostgreSQL refuses offsets beyond ±15:59, which Python allows."""

    def to_python(self, value):
        moment = super().to_python(value)
        if moment is None:
            return None
        try:
            return moment.astimezone(UTC)
        except OverflowError:
            raise ValidationError("'%(value)s' is out of range.", code="invalid", params={"value": value}) from None


class UtcIsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UtcIsoDateTimeField
