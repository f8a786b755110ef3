"""Pins one flag snapshot per request, so a request sees a consistent set of flags."""
from apps.flags.selectors import pinned_snapshot


class FlagSnapshotMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        with pinned_snapshot():
            return self.get_response(request)
