"""CSV cells a spreadsheet will not run: every export writes its rows through ``csv_row``. Pure: no Django.

OWASP's rule for CSV injection: a cell that begins with ``=``, ``+``, ``-``, ``@``, a tab or a carriage
return is read as a formula by spreadsheet programs (``=HYPERLINK(...)`` in a submitter's environment
name would run in a staff member's spreadsheet), so such a cell is prefixed with a single quote, which
makes the program show it as text. Numbers are left alone (a negative count is data, and is not a string).
"""
from __future__ import annotations

from collections.abc import Iterable

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value):
    """``value`` as it may go into a CSV cell: a string that could start a formula gets a leading ``'``."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def csv_row(values: Iterable) -> list:
    return [csv_cell(value) for value in values]
