"""Forest Host's Django apps, one room per concern (see DESIGN.md §1)."""
