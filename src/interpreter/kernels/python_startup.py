# airlock's startup file for every python kernel (ipykernel's
# --IPKernelApp.exec_files, see kernels.json). It runs in the user's namespace,
# so it defines one function, runs it and deletes it; everything it sets up
# lives in closures and in the module `_airlock_charts` (airlock_charts.py,
# next to this file). Each feature is set up on its own: a missing package
# leaves out that feature, never the kernel.
#
#   - matplotlib's inline backend: plt.show(), and a Figure as the last
#     expression, give image/png + text/plain "<Figure size ...>" + e2b/chart;
#   - pandas DataFrame -> e2b/data (to_dict(orient="list"), JSON-safe) next
#     to pandas' own text/html and text/plain;
#   - PIL Image.save(path) called from user code also displays the image;
#   - numpy, pandas and matplotlib.pyplot are imported (not into the user's
#     namespace), so the template snapshot holds them and a user's first
#     import is instant;
#   - stdout/stderr keep at most AIRLOCK_MAX_OUTPUT_BYTES (set by the server,
#     a little above its own cap) per execution: the rest is dropped in the
#     kernel. ipykernel buffers what a cell writes until its IOPub thread
#     sends it; a cell that prints faster than that would otherwise grow the
#     kernel until the guest kills it, before the server has seen enough to
#     cut the stream (OutputLimitExceeded) and interrupt the cell.


def _airlock_startup(file):
    import importlib.util
    import os
    import sys

    ip = get_ipython()  # noqa: F821 (defined in the kernel's namespace)
    here = os.path.dirname(os.path.abspath(file))

    def log_failure(what):
        import traceback
        ip.log.warning("airlock startup: %s failed:\n%s", what, traceback.format_exc())

    try:
        spec = importlib.util.spec_from_file_location("_airlock_charts", os.path.join(here, "airlock_charts.py"))
        charts = importlib.util.module_from_spec(spec)
        sys.modules["_airlock_charts"] = charts
        spec.loader.exec_module(charts)
    except Exception:
        log_failure("loading airlock_charts.py")
        return

    from IPython.core.formatters import BaseFormatter
    from traitlets import ObjectName, Unicode

    class ChartFormatter(BaseFormatter):
        """e2b/chart: the data behind a matplotlib Figure."""
        format_type = Unicode("e2b/chart")
        print_method = ObjectName("_repr_e2b_chart_")
        _return_type = (dict,)

    class DataFormatter(BaseFormatter):
        """e2b/data: the columns of a pandas DataFrame."""
        format_type = Unicode("e2b/data")
        print_method = ObjectName("_repr_e2b_data_")
        _return_type = (dict,)

    def quiet(fn):
        # A formatter that fails shows the user a traceback; a chart we cannot
        # read is no reason for that.
        def formatter(obj):
            try:
                return fn(obj)
            except Exception:
                log_failure("formatting %s" % type(obj).__name__)
                return None
        return formatter

    formatters = ip.display_formatter.formatters
    chart_formatter = ChartFormatter(parent=ip.display_formatter)
    data_formatter = DataFormatter(parent=ip.display_formatter)
    formatters["e2b/chart"] = chart_formatter
    formatters["e2b/data"] = data_formatter

    try:
        import numpy  # noqa: F401
    except ImportError:
        pass

    try:
        import matplotlib
        import matplotlib.pyplot  # noqa: F401
        from matplotlib.figure import Figure
        ip.run_line_magic("matplotlib", "inline")
        # The PNG is the figure's size (figsize x dpi), not cropped to what
        # is drawn: the inline backend's default bbox_inches="tight" is off.
        ip.run_line_magic("config", "InlineBackend.print_figure_kwargs = {'bbox_inches': None}")
        charts.record_boxplots()
        chart_formatter.for_type(Figure, quiet(charts.chart_from_figure))
    except ImportError:
        pass
    except Exception:
        log_failure("matplotlib")

    try:
        import pandas
        data_formatter.for_type(pandas.DataFrame, quiet(charts.dataframe_data))
    except ImportError:
        pass
    except Exception:
        log_failure("pandas")

    try:
        limit = int(os.environ.get("AIRLOCK_MAX_OUTPUT_BYTES", "0"))
        if limit > 0:
            written = [0]

            def reset(*_):
                written[0] = 0

            def bounded(stream):
                original_write = stream.write

                def write(text):
                    if written[0] > limit:
                        return len(text)  # dropped: over the cap
                    written[0] += len(text)
                    return original_write(text)
                return write

            ip.events.register("pre_execute", reset)
            for stream in (sys.stdout, sys.stderr):
                stream.write = bounded(stream)
    except Exception:
        log_failure("bounding stdout/stderr")

    try:
        import base64
        import io
        from PIL import Image
        from IPython.display import display

        original_save = Image.Image.save
        if not getattr(original_save, "_airlock_wrapped", False):
            def save(self, fp, format=None, **params):
                result = original_save(self, fp, format, **params)
                # Only a save to a path, called by the user's code (a cell or
                # a function it defined), displays: PIL itself, matplotlib's
                # savefig and our own PNG encoding below call save() too.
                try:
                    caller = sys._getframe(1).f_globals.get("__name__")
                    if caller == "__main__" and isinstance(fp, (str, bytes, os.PathLike)):
                        buffer = io.BytesIO()
                        image = self if self.mode in ("1", "L", "LA", "P", "RGB", "RGBA", "I;16") else self.convert("RGBA")
                        original_save(image, buffer, "PNG")
                        display({"image/png": base64.b64encode(buffer.getvalue()).decode("ascii"),
                                 "text/plain": repr(self)}, raw=True)
                except Exception:
                    log_failure("displaying a saved image")
                return result

            save._airlock_wrapped = True
            save.__doc__ = original_save.__doc__
            save.__wrapped__ = original_save
            Image.Image.save = save
    except ImportError:
        pass
    except Exception:
        log_failure("PIL")


try:
    _airlock_startup(__file__)
finally:
    del _airlock_startup
