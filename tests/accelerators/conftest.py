from tests.placement.conftest import grove_make, make_grove  # noqa: F401  (shared Grove helpers)
