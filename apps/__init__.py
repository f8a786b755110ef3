"""Forest Host's Django apps, one room per concern (see docs/design.md §1)."""
