from functools import cache

from django.apps import AppConfig
from django_tables2 import utils as tables_utils


def _cached_signature(original):
    """django-tables2 inspects the signature of a column's render function for every cell of every table
    (``utils.call_with_appropriate``); a function's signature never changes, so compute it once per
    function. Bound methods are keyed on their underlying function (a new bound object per access) and
    drop the leading ``self`` as ``inspect.signature`` does for them."""

    @cache
    def of_function(fn, bound: bool):
        args, keywords = original(fn)
        return (args[1:] if bound else args), keywords

    def signature(fn):
        function = getattr(fn, "__func__", None)
        if function is not None:
            return of_function(function, True)
        try:
            return of_function(fn, False)
        except TypeError:  # unhashable callable: nothing to cache
            return original(fn)

    return signature


class StaffConfig(AppConfig):
    name = "apps.staff"
    label = "staff"
    verbose_name = "Staff pages"

    def ready(self) -> None:
        if not getattr(tables_utils.signature, "forest_cached", False):
            tables_utils.signature = _cached_signature(tables_utils.signature)
            tables_utils.signature.forest_cached = True
