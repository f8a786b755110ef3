"""The one formatter: sizes, cores, ages, device names and accelerator summaries (pure)."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from apps.core import formatting
from apps.staff.charts import bar_fraction_svg, trend_svg


def test_sizes_cores_and_ages():
    assert formatting.bytes_h(549755813888) == "512 GiB"
    assert formatting.bytes_h(1536) == "1.5 KiB" and formatting.bytes_h(12) == "12 B"
    assert formatting.bytes_h(None) == "—" and formatting.cores(16000) == "16" and formatting.cores(500) == "0.5"
    now = datetime(2026, 1, 2, tzinfo=UTC)
    assert formatting.age(now - timedelta(seconds=30), now=now) == "30s ago"
    assert formatting.age(now - timedelta(hours=3), now=now) == "3h ago"
    assert formatting.age(now - timedelta(days=3), now=now) == "3d ago" and formatting.age(None) == "never"


def test_a_shared_chip_is_one_item_standing_for_several_devices():
    chip = SimpleNamespace(inventory_id="gpu-0", vendor="nvidia", model="NVIDIA A100-SXM4-80GB", apis=["cuda"],
                           memory_bytes=80 * 1024**3, memory_kind="dedicated", memory_enforced=True,
                           share_mode="time_sliced")
    unit = SimpleNamespace(accelerators=[{"inventory_id": "gpu-0", "allocatable": 4, "free": 3}])
    assert formatting.accelerator_summary([chip], [unit]) == [
        "1x NVIDIA A100-SXM4-80GB (cuda) · 80 GiB dedicated · time_sliced · 3/4 slots free"]
    assert formatting.device_name("apple", "M2 Ultra") == "Apple M2 Ultra"


def test_trend_chart_is_accessible_svg():
    days = [(datetime(2026, 1, d, tzinfo=UTC).date(), n) for d, n in ((1, 0), (2, 5), (3, 2))]
    svg = trend_svg(days, title="Per day <test>")
    assert svg.startswith("<svg") and 'role="img"' in svg and "&lt;test&gt;" in svg
    assert svg.count('class="bar"') == 3 and "2026-01-02: 5" in svg
    assert 'aria-label="95% used"' in bar_fraction_svg(0.95) and bar_fraction_svg(None) == ""


def test_cached_table_signatures_match_the_library():
    """apps.staff caches django-tables2's per-cell signature inspection; answers must not change."""
    from django_tables2 import utils

    from apps.staff.apps import _cached_signature

    class Column:
        def render(self, value, record):
            return value

        def other(self, **kwargs):
            return kwargs

    def plain(value, *args, table=None):
        return value

    cached = _cached_signature(_reference)
    for fn in (Column().render, Column().render, Column().other, plain):
        assert cached(fn) == _reference(fn)
    assert utils.signature.forest_cached is True
    assert utils.signature(Column().render) == (("value", "record"), None)


def _reference(fn):
    import inspect

    parameters = inspect.signature(fn).parameters.values()
    args = tuple(p.name for p in parameters if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL))
    return args, next((p.name for p in parameters if p.kind == p.VAR_KEYWORD), None)
