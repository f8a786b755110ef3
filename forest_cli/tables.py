"""Tables the CLI prints, readable in any terminal down to 80 columns.

Rich sizes a table that does not fit by shrinking its widest columns and, as a last resort, every column
evenly: a header is cut to "substr…" and a column can be cut to nothing. Here the widths are worked out
before Rich sees the table: every column gets at least its header's longest word (an id: its whole value),
the room left goes to the columns that need it in proportion to what they lack, and a long cell folds onto
more lines instead of being cut. When even the least widths do not fit, the columns marked optional are
left out, the least important first, and a caption says which (``--json`` prints every field).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.table import Table
from rich.text import Text

GAP = 2  # the space between two columns (SIMPLE_HEAD, no edge, padding collapsed)
WORD = 12  # a cell's words up to this long are never folded, when the terminal has room for that


@dataclass(frozen=True)
class Col:
    header: str
    drop: int = 0  # 0: always shown; otherwise left out at narrow widths, the highest first
    whole: bool = False  # never folded (an id, an age): its least width is its widest value


def _plain(cell: str) -> str:
    return Text.from_markup(cell).plain


def _least(col: Col, cells: list[str]) -> tuple[int, int]:
    """(the narrowest a column ever gets: its header's longest word, or a ``whole`` column's widest value;
    the narrowest it gets while there is room: that, or its longest word up to ``WORD``, so that a name like
    "compute" is not folded while a long path may be)."""
    header = max((len(word) for word in col.header.split()), default=1)
    if col.whole:
        widest = max([header, *(len(_plain(cell)) for cell in cells)])
        return widest, widest
    longest = max((len(word) for cell in cells for word in _plain(cell).split()), default=1)
    return header, max(header, min(longest, WORD))


def _share(base: list[int], want: list[int], room: int) -> list[int]:
    """``base`` plus a share of ``room - sum(base)`` for each column, in proportion to how far it is from
    ``want`` (largest remainders first, so the total is exactly ``room``)."""
    lack = [w - b for w, b in zip(want, base, strict=True)]
    spare, total = room - sum(base), sum(lack) or 1
    shares = [spare * value / total for value in lack]
    widths = [b + int(share) for b, share in zip(base, shares, strict=True)]
    for index in sorted(range(len(widths)), key=lambda i: shares[i] - int(shares[i]), reverse=True)[
            :room - sum(widths)]:
        widths[index] += 1
    return widths


def _widths(floor: list[int], least: list[int], natural: list[int], room: int) -> list[int]:
    """Each column's width: its natural width when everything fits; else its least width and a share of the
    rest; else (a very narrow terminal) its floor and a share of the rest; never below the floor."""
    if sum(natural) <= room:
        return natural
    if sum(least) <= room:
        return _share(least, natural, room)
    if sum(floor) <= room:
        return _share(floor, least, room)
    return floor


def table(columns: Sequence[Col | str], rows: Sequence[Sequence[str]], *, width: int,
          title: str | None = None) -> Table:
    """A table of ``rows`` (cells may hold Rich markup) that fits ``width`` terminal columns."""
    cols = [col if isinstance(col, Col) else Col(col) for col in columns]
    by_column = [[str(row[index]) for row in rows] for index in range(len(cols))]
    floor, least = zip(*(_least(col, cells) for col, cells in zip(cols, by_column, strict=True)), strict=True)
    natural = [max([len(col.header), *(len(_plain(cell)) for cell in cells)], default=1)
               for col, cells in zip(cols, by_column, strict=True)]
    natural = [max(n, m) for n, m in zip(natural, least, strict=True)]
    keep = list(range(len(cols)))
    while sum(least[i] for i in keep) + GAP * (len(keep) - 1) > width and any(cols[i].drop for i in keep):
        keep.remove(max((i for i in keep if cols[i].drop), key=lambda i: (cols[i].drop, i)))
    hidden = [cols[i].header for i in range(len(cols)) if i not in keep]
    room = max(len(keep), width - GAP * (len(keep) - 1))
    sizes = _widths([floor[i] for i in keep], [least[i] for i in keep], [natural[i] for i in keep], room)
    result = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False,
                   collapse_padding=True, show_edge=False, caption_justify="left",
                   caption=f"not shown at {width} columns: {', '.join(hidden)} (--json prints every field)"
                   if hidden else None)
    for index, size in zip(keep, sizes, strict=True):
        result.add_column(cols[index].header, width=size, overflow="fold", no_wrap=cols[index].whole)
    for row in rows:
        result.add_row(*(str(row[index]) for index in keep))
    return result
