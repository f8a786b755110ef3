"""Template filters for staff pages; each delegates to ``apps.staff.formatting`` (the one formatter)."""
from __future__ import annotations

import json

from django import template
from django.utils import timezone
from django.utils.html import format_html

from apps.core import formatting
from apps.placement.outcome import candidate_fit_label

register = template.Library()


@register.filter
def bytes_h(value) -> str:
    return formatting.bytes_h(value)


@register.filter
def cores(milli) -> str:
    return formatting.cores(milli)


@register.filter
def age(moment) -> str:
    return formatting.age(moment, now=timezone.now())


@register.filter
def duration(seconds) -> str:
    return formatting.duration(seconds)


@register.filter
def vendor_label(vendor) -> str:
    return formatting.vendor_label(vendor or "")


@register.filter
def pretty_json(value) -> str:
    return json.dumps(value, indent=2, sort_keys=True)


@register.filter
def percent(fraction) -> str:
    return "—" if fraction is None else f"{fraction * 100:.0f}%"


@register.simple_tag(takes_context=True)
def query_with(context, **changes) -> str:
    """The current query string with some parameters replaced (or removed when given None)."""
    query = context["request"].GET.copy()
    for key, value in changes.items():
        query.pop(key, None)
        if value not in (None, ""):
            query[key] = value
    return query.urlencode()


@register.simple_tag
def device_name(vendor, model) -> str:
    return formatting.device_name(vendor or "", model or "")


@register.simple_tag
def candidate_fit(verdict: dict) -> str:
    """A candidate's "eligible" cell: compatible and fitting, compatible but never (or later), or not
    (``apps.placement.outcome.candidate_fit_label``)."""
    label, kind = candidate_fit_label(verdict)
    return format_html('<span class="badge {}">{}</span>', kind, label)
