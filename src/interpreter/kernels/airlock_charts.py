"""The data behind a matplotlib Figure, in the shapes of E2B's `ChartTypes`
(the `e2b/chart` result; shared/spec/e2b-code-interpreter.md B.2), and
JSON-safe values for `e2b/chart` and `e2b/data`.

    chart_from_figure(fig) -> dict

One visible axes gives one chart; several give {"type": "superchart",
"title", "elements": [chart, ...]} (colorbars are left out). An axes is:
  box_and_whisker  if it holds a box plot (recorded by record_boxplots(),
                   which wraps Axes.bxp, so the statistics are exact);
  pie              if it holds pie wedges;
  bar              if it holds bar containers (bar, barh, hist);
  line             if it holds data lines;
  scatter          if it holds marker collections;
  unknown          otherwise (images, contours, ...), with no elements.
2-D charts carry x_label/y_label and x_unit/y_unit (the text in a trailing
"(...)" or "[...]" of the label, else null); line and scatter charts also
x/y_ticks (values in the view), x/y_tick_labels and x/y_scale (linear, log,
symlog, logit, function, functionlog, asinh, or datetime / categorical for
date and category axes). Values: numpy scalars -> int/float, NaN and
infinities -> null, dates -> ISO 8601 strings, category positions -> the
category; anything else unknown -> str().
Auto-generated artist labels ("_child0", "_container1") become "Line 0",
"Group 1" and the like; a missing title is null.
"""

import datetime
import decimal
import functools
import inspect
import math
import numbers
import re

import numpy as np

_UNIT_RE = re.compile(r"[\(\[]\s*([^\(\)\[\]]+?)\s*[\)\]]\s*$")


# --- values -------------------------------------------------------------------

def json_value(v):
    """A JSON-safe copy of v (see the module comment)."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, (numbers.Integral, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating, decimal.Decimal)) or (
            isinstance(v, numbers.Real) and not isinstance(v, (datetime.date, datetime.time))):
        f = float(v)
        return f if math.isfinite(f) else None
    if isinstance(v, np.datetime64):
        if np.isnat(v):
            return None
        item = v.astype("datetime64[us]").item()
        return item.isoformat() if isinstance(item, (datetime.datetime, datetime.date)) else str(v)
    if isinstance(v, np.timedelta64):
        return None if np.isnat(v) else v.astype("timedelta64[us]").item().total_seconds()
    if isinstance(v, (datetime.datetime, datetime.date, datetime.time)):
        try:
            if v != v:  # pandas.NaT
                return None
        except Exception:
            pass
        return v.isoformat()
    if isinstance(v, datetime.timedelta):
        try:
            if v != v:
                return None
        except Exception:
            pass
        return v.total_seconds()
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, dict):
        return {json_key(k): json_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, np.ndarray)):
        return [json_value(x) for x in v]
    try:
        if v != v:  # pandas.NA and other NaN-likes
            return None
    except Exception:
        pass
    if hasattr(v, "isoformat"):  # pandas.Period and the like
        try:
            return v.isoformat()
        except Exception:
            pass
    return str(v)


def json_key(k):
    return k if isinstance(k, str) else str(json_value(k))


def dataframe_data(df):
    """e2b/data: df.to_dict(orient="list"), JSON-safe, keys as strings."""
    return {json_key(k): [json_value(v) for v in column] for k, column in df.to_dict(orient="list").items()}


# --- axes helpers -----------------------------------------------------------

def _axis_kind(axis):
    converter = getattr(axis, "converter", None)
    module = type(converter).__module__ if converter is not None else ""
    # matplotlib's date converters, and pandas' DatetimeConverter (same numbers)
    if module.startswith("matplotlib.dates") or ("converter" in module and "Date" in type(converter).__name__):
        return "datetime"
    if module.startswith("matplotlib.category"):
        return "categorical"
    return None


def _axis_value(v, axis, kind):
    """A data value on `axis`, as the user gave it where possible."""
    if kind == "datetime" and isinstance(v, (numbers.Real, np.floating, np.integer)) and not isinstance(v, bool):
        try:
            import matplotlib.dates as mdates
            if math.isfinite(float(v)):
                return mdates.num2date(float(v)).replace(tzinfo=None).isoformat()
        except Exception:
            pass
    if kind == "categorical" and isinstance(v, (numbers.Real, np.floating, np.integer)):
        names = _categories(axis)
        f = float(v)
        if math.isfinite(f) and f == round(f) and 0 <= int(f) < len(names):
            return names[int(f)]
    return json_value(v)


def _categories(axis):
    units = getattr(axis, "units", None)
    mapping = getattr(units, "_mapping", None) or {}
    names = [None] * len(mapping)
    for name, index in mapping.items():
        if 0 <= int(index) < len(names):
            names[int(index)] = name
    return names


def _scale(ax, which):
    axis = ax.xaxis if which == "x" else ax.yaxis
    kind = _axis_kind(axis)
    if kind:
        return kind
    return ax.get_xscale() if which == "x" else ax.get_yscale()


def _ticks(ax, which):
    """(values, labels) of the major ticks inside the view."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    kind = _axis_kind(axis)
    lo, hi = sorted(axis.get_view_interval())
    eps = (hi - lo) * 1e-9
    locs = [t for t in axis.get_majorticklocs() if lo - eps <= t <= hi + eps]
    try:
        labels = list(axis.get_major_formatter().format_ticks(locs))
    except Exception:
        labels = [str(t) for t in locs]
    return [_axis_value(t, axis, kind) for t in locs], [str(s) for s in labels]


def _label_and_unit(text):
    text = text or ""
    match = _UNIT_RE.search(text)
    return (text or None), (match.group(1) if match else None)


def _title(ax):
    for loc in ("center", "left", "right"):
        title = ax.get_title(loc)
        if title:
            return title
    return None


def _name(label, kind, index):
    label = str(label) if label is not None else ""
    if label.startswith("_"):
        return "%s %d" % (kind, index)
    return label


def _two_d(ax, chart_type):
    x_label, x_unit = _label_and_unit(ax.get_xlabel())
    y_label, y_unit = _label_and_unit(ax.get_ylabel())
    return {"type": chart_type, "title": _title(ax), "x_label": x_label, "y_label": y_label,
            "x_unit": x_unit, "y_unit": y_unit}


def _point_chart(ax, chart_type, elements):
    chart = _two_d(ax, chart_type)
    for which in ("x", "y"):
        ticks, labels = _ticks(ax, which)
        chart[which + "_ticks"] = ticks
        chart[which + "_scale"] = _scale(ax, which)
        chart[which + "_tick_labels"] = labels
    chart["elements"] = elements
    return chart


def _tick_label_at(axis, position, tolerance):
    """The label of the major tick at `position` (within tolerance), else
    the position itself as a data value."""
    kind = _axis_kind(axis)
    try:
        locs = list(axis.get_majorticklocs())
        labels = axis.get_major_formatter().format_ticks(locs)
        best = min(range(len(locs)), key=lambda i: abs(locs[i] - position)) if locs else None
        if best is not None and abs(locs[best] - position) <= tolerance and labels[best]:
            return str(labels[best])
    except Exception:
        pass
    value = _axis_value(position, axis, kind)
    return value if isinstance(value, str) else str(value)


# --- chart kinds ------------------------------------------------------------

def _line_chart(ax, lines):
    xkind, ykind = _axis_kind(ax.xaxis), _axis_kind(ax.yaxis)
    elements = []
    for i, line in enumerate(lines):
        xs = line.get_xdata(orig=True)
        ys = line.get_ydata(orig=True)
        xs = list(xs) if np.iterable(xs) else [xs]
        ys = list(ys) if np.iterable(ys) else [ys]
        points = [[_axis_value(x, ax.xaxis, xkind), _axis_value(y, ax.yaxis, ykind)] for x, y in zip(xs, ys)]
        elements.append({"label": _name(line.get_label(), "Line", i), "points": points})
    return _point_chart(ax, "line", elements)


def _scatter_chart(ax, collections):
    xkind, ykind = _axis_kind(ax.xaxis), _axis_kind(ax.yaxis)
    elements = []
    for i, collection in enumerate(collections):
        offsets = np.asarray(collection.get_offsets())
        if np.ma.isMaskedArray(offsets):
            offsets = offsets.filled(np.nan)
        points = [[_axis_value(x, ax.xaxis, xkind), _axis_value(y, ax.yaxis, ykind)]
                  for x, y in offsets.reshape(-1, 2)] if offsets.size else []
        elements.append({"label": _name(collection.get_label(), "Scatter", i), "points": points})
    return _point_chart(ax, "scatter", elements)


def _bar_chart(ax, containers):
    chart = _two_d(ax, "bar")
    elements = []
    for i, container in enumerate(containers):
        group = _name(container.get_label(), "Group", i)
        horizontal = getattr(container, "orientation", None) == "horizontal"
        values = getattr(container, "datavalues", None)
        for j, rect in enumerate(container.patches):
            if horizontal:
                position, size = rect.get_y() + rect.get_height() / 2, rect.get_height()
                label = _tick_label_at(ax.yaxis, position, abs(size) / 2)
                value = rect.get_width()
            else:
                position, size = rect.get_x() + rect.get_width() / 2, rect.get_width()
                label = _tick_label_at(ax.xaxis, position, abs(size) / 2)
                value = rect.get_height()
            if values is not None and j < len(values):
                value = values[j]
            elements.append({"label": label, "value": json_value(value), "group": group})
    chart["elements"] = elements
    return chart


def _pie_chart(ax, wedges):
    elements = [{"label": str(w.get_label()) if not str(w.get_label()).startswith("_") else "",
                 "angle": json_value(abs(w.theta2 - w.theta1)), "radius": json_value(w.r)}
                for w in wedges]
    return {"type": "pie", "title": _title(ax), "elements": elements}


def _box_chart(ax, records):
    chart = _two_d(ax, "box_and_whisker")
    elements = []
    for record in records:
        axis = ax.xaxis if record["vert"] else ax.yaxis
        for stats, position in zip(record["stats"], record["positions"]):
            label = stats.get("label")
            if label is None or label == "":
                label = _tick_label_at(axis, position, 0.25)
            elements.append({
                "label": str(label),
                "min": json_value(stats.get("whislo")),
                "first_quartile": json_value(stats.get("q1")),
                "median": json_value(stats.get("med")),
                "third_quartile": json_value(stats.get("q3")),
                "max": json_value(stats.get("whishi")),
                "outliers": [json_value(v) for v in np.asarray(stats.get("fliers", [])).ravel()],
            })
    chart["elements"] = elements
    return chart


def _live_boxplots(ax):
    live = []
    for record in getattr(ax, "_airlock_boxplots", []):
        medians = record["artists"].get("medians") or []
        if any(m in ax.lines for m in medians) or any(b in ax.patches for b in record["artists"].get("boxes") or []):
            live.append(record)
    return live


def chart_from_axes(ax):
    from matplotlib.collections import PathCollection
    from matplotlib.container import BarContainer
    from matplotlib.patches import Wedge

    boxplots = _live_boxplots(ax)
    if boxplots:
        return _box_chart(ax, boxplots)
    wedges = [p for p in ax.patches if isinstance(p, Wedge)]
    if wedges:
        return _pie_chart(ax, wedges)
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    if bars:
        return _bar_chart(ax, bars)
    lines = [line for line in ax.get_lines()
             if line.get_visible() and line.get_transform() is ax.transData and len(line.get_xdata(orig=False)) > 0]
    if lines:
        return _line_chart(ax, lines)
    scatters = [c for c in ax.collections if isinstance(c, PathCollection)]
    if scatters:
        return _scatter_chart(ax, scatters)
    return {"type": "unknown", "title": _title(ax), "elements": []}


def chart_from_figure(fig):
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]
    suptitle = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) is not None else None
    if len(axes) == 1:
        chart = chart_from_axes(axes[0])
        if chart.get("title") is None and suptitle:
            chart["title"] = suptitle
        return chart
    if not axes:
        return {"type": "unknown", "title": suptitle or None, "elements": []}
    return {"type": "superchart", "title": suptitle or None, "elements": [chart_from_axes(ax) for ax in axes]}


# --- box plot statistics ----------------------------------------------------

def record_boxplots():
    """Wraps matplotlib's Axes.bxp (what boxplot() and seaborn draw with) so
    each axes keeps the exact statistics of its box plots."""
    from matplotlib.axes import Axes

    original = Axes.bxp
    if getattr(original, "_airlock_wrapped", False):
        return
    signature = inspect.signature(original)

    @functools.wraps(original)
    def bxp(self, *args, **kwargs):
        artists = original(self, *args, **kwargs)
        try:
            bound = signature.bind(self, *args, **kwargs)
            bound.apply_defaults()
            stats = [dict(s) for s in bound.arguments["bxpstats"]]
            positions = bound.arguments.get("positions")
            positions = list(positions) if positions is not None else list(range(1, len(stats) + 1))
            vert = bound.arguments.get("vert", True)
            records = self.__dict__.setdefault("_airlock_boxplots", [])
            records.append({"stats": stats, "positions": positions, "vert": vert is not False,
                            "artists": artists})
        except Exception:
            pass
        return artists

    bxp._airlock_wrapped = True
    Axes.bxp = bxp
