#!/usr/bin/env python3
"""Charts of a benchmark run (issue 17 item 5): PNG pictures of what Benchmarks/run.py measured.

    python3 Benchmarks/charts.py Benchmarks/results/latest.json Benchmarks/charts   # draw from a results file
    python3 Benchmarks/charts.py --self-test                                        # synthetic results, no benchmark

run.py calls draw_all() after writing latest.json (make bench: into Benchmarks/charts/, which BENCHMARKS.md embeds;
--smoke: into the smoke run's own directory, so make test runs this code). Charts:

  fanout.png               scenario 1: delivered notifications/s against subscribers (64 B), one line per system;
                           and against payload size at the payload sweep's subscriber count
  rtt.png                  scenario 2: round-trip percentiles per system; scenario 10 (a hostile user) beside it
  unthrottled.png          scenario 8: minimum / median / maximum delivered/s of each configuration, per S
  unthrottled_stopped.png  scenario 9: the same with and without a SIGSTOPped subscriber

A scenario missing from the results (not run, or every row an error) draws no chart and says so in the notes
draw_all() returns; a system missing from a scenario is left out of its chart and named in the chart's footnote.
matplotlib is imported only when drawing, so run.py can import this module where matplotlib is not installed.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import textwrap
from pathlib import Path

# Markdown alt text of each chart (run.py puts `![ALT](charts/NAME.png)` under the matching results table).
ALT = {
    "fanout": "Fan-out: delivered notifications/s against subscribers and payload size, one line per system",
    "rtt": "Round-trip latency percentiles (p50, p99, p99.9, max) per system, and notifyd's beside a hostile user",
    "unthrottled": "Unthrottled poster: minimum, median and maximum delivered notifications/s per configuration",
    "unthrottled_stopped": "Unthrottled poster with and without a SIGSTOPped subscriber: minimum, median, maximum",
}
CHART_NAMES = tuple(ALT)

# One colour per system in every chart, so a reader who found notifyd's colour once keeps it. The ALT systems
# (run.py --alt-bin: another build of notifyd, for before/after) take their base system's colour, dashed.
COLOURS = {
    "notifyd-c": "#1f63b4",
    "notifyd-swift": "#17a2c4",
    "relay": "#6b6b6b",
    "redis": "#d62728",
    "dbus-broker": "#2ca02c",
    "dbus-daemon": "#9467bd",
}
# For systems this file does not know yet: assigned in the order the results list them (deterministic).
SPARE_COLOURS = ["#ff7f0e", "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#7f7f7f"]

DPI = 110  # with the figure sizes below: about 1,300 px wide, legible when GitHub scales it to the page
FONT = "DejaVu Sans"  # shipped inside matplotlib: the same glyphs (µ, ·, ×) and metrics on every machine


# ---------------------------------------------------------------- formatting (mirrors run.py's tables)

def fmt_rate(v: float | None) -> str:
    if v is None:
        return "–"
    if v >= 1e6:
        return f"{v / 1e6:.2f} M/s" if v < 1e7 else f"{v / 1e6:.1f} M/s"
    if v >= 1e3:
        return f"{v / 1e3:.0f} k/s"
    return f"{v:.0f}/s"


def _axis_rate(v: float, _pos=None) -> str:
    # Tick labels: shorter than fmt_rate (no decimals where the ticks are round numbers).
    if v >= 1e6:
        return f"{v / 1e6:g} M/s"
    if v >= 1e3:
        return f"{v / 1e3:g} k/s"
    return "0" if v == 0 else f"{v:g}/s"


def _axis_us(v: float, _pos=None) -> str:
    return f"{v / 1000:g} ms" if v >= 1000 else f"{v:g} µs"


def _value_us(v: float) -> str:
    return f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.0f} µs"


def _payload(b: int) -> str:
    return f"{b // 1024} KiB" if b >= 1024 and b % 1024 == 0 else f"{b} B"


# ---------------------------------------------------------------- shared pieces

class _Style:
    """Colour, line style and label of each system in this run's results."""

    def __init__(self, data: dict):
        self.systems = data.get("systems") or {}
        self._spare: dict[str, str] = {}

    def label(self, key: str) -> str:
        return (self.systems.get(key) or {}).get("label") or key

    @staticmethod
    def base(key: str) -> str:
        return key[:-4] if key.endswith("-alt") else key

    def colour(self, key: str) -> str:
        base = self.base(key)
        if base in COLOURS:
            return COLOURS[base]
        if base not in self._spare:
            self._spare[base] = SPARE_COLOURS[len(self._spare) % len(SPARE_COLOURS)]
        return self._spare[base]

    def line(self, key: str) -> dict:
        alt = key.endswith("-alt")
        # notifyd through the C client is what the charts are about: drawn last (on top of lines it would
        # otherwise hide where systems coincide) and a little heavier.
        main = key == "notifyd-c"
        return {"color": self.colour(key), "linestyle": "--" if alt else "-", "marker": "s" if alt else "o",
                "markerfacecolor": "white" if alt else self.colour(key), "linewidth": 2.4 if main else 1.6,
                "markersize": 6, "zorder": 4 if main else 3}

    def skipped(self) -> list[str]:
        """Systems the run could not run at all (not installed, failed to start), for the footnotes."""
        return [f"{v.get('label') or k} ({v.get('reason') or 'unavailable'})"
                for k, v in self.systems.items() if not v.get("available", True)]


def _tint(colour: str, amount: float = 0.55) -> str:
    """The colour mixed with white: the same system, in a lighter role (a baseline, a run without something)."""
    r, g, b = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return "#" + "".join(f"{round(c + (255 - c) * amount):02x}" for c in (r, g, b))


def _subtitle(data: dict) -> str:
    """The run's date, mode, notifyd build (its commit) and machine, so a picture cut out of the page still says
    where its numbers come from."""
    meta = data.get("meta") or {}
    m = meta.get("machine") or {}
    v = meta.get("versions") or {}
    first = " · ".join(x for x in (
        f"Run {meta['date']}" if meta.get("date") else None,
        f"mode {meta['mode']}" if meta.get("mode") else None,
        f"notifyd {v['notifyd']}" if v.get("notifyd") else None) if x)
    machine = ", ".join(x for x in (
        m.get("cpu"), f"{m['cores']} cores" if m.get("cores") else None,
        f"{m['memory_gib']} GiB" if m.get("memory_gib") else None,
        f"Linux {m['kernel']}" if m.get("kernel") else None) if x)
    load = meta.get("load") or {}
    if load.get("load_before"):
        machine += f" · load {load['load_before'][0]:.2f} before the run"
        if load.get("competing_before") or load.get("samples_with_competing_builds"):
            machine += " (other builds running: numbers measured beside them)"
    return "\n".join(x for x in (first, machine) if x)


LEGEND_ROW_IN = 0.27  # height of a legend row at 9 pt, inches
NOTE_LINE_IN = 0.155  # height of a note line at 8 pt
NOTE_CHAR_IN = 0.064  # average width of a character at 8 pt DejaVu Sans


def _wrap(notes: list[str], width_in: float) -> list[str]:
    # Wrapped here rather than by matplotlib (wrap=True) so the footer's height is known before drawing: the
    # figure is sized to fit it, with neither a gap nor an overlap.
    chars = max(40, int((width_in - 0.4) / NOTE_CHAR_IN))
    return [line for note in notes for line in textwrap.wrap(note, chars) or [""]]


def _figure(plt, ncols: int, width: float, plot_height: float, legend_rows: int, notes: list[str], sharey=False):
    """A figure with a row of `ncols` plots above a footer axes sized for the legend and the notes, so neither
    covers data and both stay readable at any number of systems. Returns the figure, its plot axes and the
    footer, which _footnotes fills once the plots have their legend handles."""
    lines = _wrap(notes, width)
    legend_h = LEGEND_ROW_IN * legend_rows + (0.08 if legend_rows else 0)
    footer_h = legend_h + NOTE_LINE_IN * len(lines) + 0.1
    fig = plt.figure(figsize=(width, plot_height + footer_h + 0.95), dpi=DPI, layout="constrained")
    gs = fig.add_gridspec(2, ncols, height_ratios=[plot_height, footer_h])
    axes = []
    for i in range(ncols):
        kw = {"sharey": axes[0]} if sharey and axes else {}
        axes.append(fig.add_subplot(gs[0, i], **kw))
    footer = fig.add_subplot(gs[1, :])
    footer.axis("off")
    return fig, axes, _Footer(fig, footer, lines, legend_h / footer_h)


class _Footer:
    def __init__(self, fig, ax, lines: list[str], legend_frac: float):
        self.fig, self.ax, self.lines, self.legend_frac = fig, ax, lines, legend_frac


def _footnotes(footer: _Footer, handles=None, labels=None, ncol: int = 4) -> None:
    from matplotlib.transforms import blended_transform_factory
    lines, legend_frac = footer.lines, footer.legend_frac
    if handles:
        footer.ax.legend(handles, labels, loc="upper center", ncol=ncol, frameon=False, fontsize=9,
                         handlelength=2.6, columnspacing=1.6, borderaxespad=0)
    if lines:
        # x from the figure's left edge (the footer axes starts where the plots do, right of long tick labels,
        # and the notes are wrapped to the figure's width); y in the footer, under the legend.
        where = blended_transform_factory(footer.fig.transFigure, footer.ax.transAxes)
        footer.ax.text(0.012, 1.0 - legend_frac, "\n".join(lines), transform=where, fontsize=8,
                       color="#444444", va="top", ha="left", linespacing=1.25)


def _log_axis(axis, formatter) -> None:
    """Log-scale tick labels at 1, 2 and 5 of each decade (the minor ones lighter): with labels only at powers
    of ten a reader cannot tell 2 M/s from 5 M/s."""
    from matplotlib.ticker import FuncFormatter, LogLocator
    axis.set_major_locator(LogLocator(base=10, subs=(1.0,)))
    axis.set_major_formatter(FuncFormatter(formatter))
    axis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0)))
    axis.set_minor_formatter(FuncFormatter(formatter))
    axis.set_tick_params(which="minor", labelsize=7.5, labelcolor="#666666")


def _save(fig, plt, path: Path) -> Path:
    # metadata Software=None: no matplotlib version stamp, so the same results give the same bytes (and PNG
    # writes no time chunk), and a re-run with unchanged numbers leaves nothing for git to show.
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return path


def _ok(rows) -> list[dict]:
    return [r for r in rows or [] if isinstance(r, dict) and "error" not in r]


def _errors(rows, style: _Style, what) -> list[str]:
    return [f"{style.label(r.get('system', '?'))}{what(r)}: error ({str(r['error'])[:90]})"
            for r in rows or [] if isinstance(r, dict) and "error" in r]


# ---------------------------------------------------------------- (a) fan-out

def draw_fanout(plt, data: dict, out: Path, style: _Style) -> tuple[Path | None, list[str]]:
    rows = (data.get("results") or {}).get("fanout") or []
    ok = [r for r in _ok(rows) if r.get("delivered_per_s")]
    if not ok:
        return None, ["fanout: no fan-out results in this run" + (" (every row an error)" if rows else "")]
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

    # The subscriber sweep is the payload with the most subscriber counts (64 B); the payload sweep is the
    # subscriber count with the most payloads (S = 4). Chosen from the data rather than run.py's settings, so a
    # --scenarios/--smoke run or an older results file draws what it has.
    def most(key_fixed, key_varied):
        groups: dict = {}
        for r in ok:
            groups.setdefault(r[key_fixed], set()).add(r[key_varied])
        return max(sorted(groups), key=lambda k: len(groups[k]))

    sweep_payload = most("payload", "subscribers")
    sweep_s = most("subscribers", "payload")
    payloads_at_s = sorted({r["payload"] for r in ok if r["subscribers"] == sweep_s})
    panels = [("subscribers", sweep_payload)] + ([("payload", sweep_s)] if len(payloads_at_s) > 1 else [])
    order = list(dict.fromkeys(r["system"] for r in ok))

    notes = ["Points: median of the runs; bars: lowest to highest run where the configuration was repeated. "
             "Log scales: the systems span more than two orders of magnitude."]
    incomplete = [f"{style.label(r['system'])} S={r['subscribers']} {_payload(r['payload'])}"
                  for r in ok if r.get("complete") is False]
    if incomplete:
        notes.append("Hollow triangle: not every notification arrived: " + "; ".join(incomplete) + ".")
    notes += _errors(rows, style, lambda r: f" S={r.get('subscribers')} {_payload(r.get('payload', 0))}")
    if style.skipped():
        notes.append("Not in this run: " + "; ".join(style.skipped()) + ".")

    fig, axes, footer = _figure(plt, len(panels), 12.5 if len(panels) > 1 else 9, 5.2, (len(order) + 3) // 4,
                                notes, sharey=True)
    for ax, (varied, fixed) in zip(axes, panels):
        for key in order:
            pts = sorted((r for r in ok if r["system"] == key and
                          (r["payload"] == fixed if varied == "subscribers" else r["subscribers"] == fixed)),
                         key=lambda r: r[varied])
            if not pts:
                continue
            # x for payload: 0 B cannot sit on a log axis; payloads are plotted at their rank and labelled.
            xs = ([r[varied] for r in pts] if varied == "subscribers"
                  else [payloads_at_s.index(r["payload"]) for r in pts])
            ys = [r["delivered_per_s"] for r in pts]
            # max(0, …): the median is stored unrounded and the runs rounded, so they differ in the last digit.
            lo = [max(0.0, y - min(r.get("runs") or [y])) for y, r in zip(ys, pts)]
            hi = [max(0.0, max(r.get("runs") or [y]) - y) for y, r in zip(ys, pts)]
            kw = style.line(key)
            ax.errorbar(xs, ys, yerr=[lo, hi], capsize=3, elinewidth=1, label=style.label(key), **kw)
            bad = [(x, y) for x, y, r in zip(xs, ys, pts) if r.get("complete") is False]
            if bad:
                ax.plot(*zip(*bad), linestyle="none", marker="^", markersize=12, markerfacecolor="none",
                        markeredgecolor=kw["color"], zorder=5)
        ax.set_yscale("log")
        _log_axis(ax.yaxis, _axis_rate)
        ax.grid(True, which="major", alpha=0.35)
        ax.grid(True, which="minor", axis="y", alpha=0.12)
        if varied == "subscribers":
            ss = sorted({r["subscribers"] for r in ok if r["payload"] == fixed})
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_locator(FixedLocator(ss))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
            ax.xaxis.set_minor_locator(NullLocator())
            ax.xaxis.set_minor_formatter(NullFormatter())
            if len(ss) == 1:  # a one-point sweep (smoke): a log axis needs some width around it
                ax.set_xlim(ss[0] / 2, ss[0] * 2)
            ax.set_xlabel("subscribers S (log scale)")
            ax.set_title(f"Delivered notifications/s against subscribers ({_payload(fixed)} payload)", fontsize=11)
        else:
            ax.set_xticks(range(len(payloads_at_s)), [_payload(p) for p in payloads_at_s])
            ax.set_xlabel("payload size")
            ax.set_title(f"Delivered notifications/s against payload size (S = {fixed})", fontsize=11)
            ax.tick_params(labelleft=True)
            ax.tick_params(which="minor", labelleft=True)
    axes[0].set_ylabel("delivered notifications/s, all subscribers (log scale)")
    fig.suptitle("1 · Fan-out: one poster, S subscribers of one name\n" + _subtitle(data), fontsize=10)
    handles, labels = axes[0].get_legend_handles_labels()
    _footnotes(footer, handles, labels)
    return _save(fig, plt, out / "fanout.png"), []


# ---------------------------------------------------------------- (b) round trips

PERCENTILES = [("p50_us", "p50"), ("p99_us", "p99"), ("p999_us", "p99.9"), ("max_us", "max")]


def draw_rtt(plt, data: dict, out: Path, style: _Style) -> tuple[Path | None, list[str]]:
    res = data.get("results") or {}
    rows = res.get("rtt") or []
    ok = [r for r in _ok(rows) if all(r.get(k) is not None for k, _ in PERCENTILES)]
    hostile = res.get("hostile") or {}
    phases = [(k, t) for k, t in (("idle", "idle daemon"), ("attacked", "slow subscriber + flood"),
                                  ("quotas", "every quota taken + slow subscriber + flood"))
              if isinstance(hostile.get(k), dict) and hostile[k].get("p50_us") is not None]
    if not ok and not phases:
        return None, ["rtt: no round-trip results in this run" + (" (every row an error)" if rows else "")]

    # The results keep percentiles, not samples or a histogram: the curve joins the recorded percentiles (no
    # p90, no CDF), evenly spaced like the "nines" axis of a latency percentile plot.
    notes = ["Recorded percentiles only (the results keep no samples or histogram): p50, p99, p99.9 and the "
             "maximum, each the median over the runs"
             + ("; bars: lowest to highest run. Points are spread sideways a little so that bars of equal values "
                "stay visible." if ok else ".")]
    notes += _errors(rows, style, lambda r: "")
    if style.skipped():
        notes.append("Not in this run: " + "; ".join(style.skipped()) + ".")
    if hostile.get("skipped") or hostile.get("error"):
        notes.append(f"Hostile-user scenario: {hostile.get('skipped') or 'error: ' + str(hostile['error'])[:120]}")

    panels = (["rtt"] if ok else []) + (["hostile"] if phases else [])
    fig, axes, footer = _figure(plt, len(panels), 12.5 if len(panels) > 1 else 9, 5.2,
                                (len(ok) + 3) // 4 if ok else 0, notes, sharey=True)
    xs = list(range(len(PERCENTILES)))
    handles, labels = [], []
    for ax, panel in zip(axes, panels):
        if panel == "rtt":
            for i, r in enumerate(ok):
                # Dodge: each system a little to the side, so coinciding points and whiskers do not hide each other.
                dx = (i - (len(ok) - 1) / 2) * min(0.05, 0.4 / max(1, len(ok)))
                ys = [r[k] for k, _ in PERCENTILES]
                runs = [r.get(k + "_runs") or [r[k]] for k, _ in PERCENTILES]
                lo = [max(0.0, y - min(v)) for y, v in zip(ys, runs)]
                hi = [max(0.0, max(v) - y) for y, v in zip(ys, runs)]
                ax.errorbar([x + dx for x in xs], ys, yerr=[lo, hi], capsize=2.5, elinewidth=1,
                            label=style.label(r["system"]), **style.line(r["system"]))
            samples = {r.get("samples") for r in ok}
            ax.set_title(f"2 · Round trip (ping → pong, {_payload(ok[0].get('payload', 64))})"
                         + (f", {samples.pop():,} samples per system" if len(samples) == 1 else ""), fontsize=11)
            handles, labels = ax.get_legend_handles_labels()
        else:
            key = hostile.get("system", "notifyd-c")
            shades = [style.colour(key), "#ff7f0e", "#b2182b"]
            for (phase, title), colour in zip(phases, shades):
                h = hostile[phase]
                ax.plot(xs, [h[k] for k, _ in PERCENTILES], color=colour, marker="o", linewidth=1.8,
                        label=f"{title} ({h.get('runs', '?')} run{'' if h.get('runs') == 1 else 's'})")
            # The values as a small table in the empty lower right: labels beside the points collide where
            # the phases coincide (p50), and three lines leave room for it.
            rows_text = [("", [t for _, t in PERCENTILES], "#333333")] + [
                (t.split(" ")[0] if i == 0 else ("flood" if i == 1 else "quotas"),
                 [_value_us(hostile[p][k]) for k, _ in PERCENTILES], c)
                for i, ((p, t), c) in enumerate(zip(phases, shades))]
            for j, (name, cells, colour) in enumerate(rows_text):
                ax.text(0.98, 0.05 + 0.055 * (len(rows_text) - 1 - j),
                        f"{name:<7}" + "".join(f"{c:>9}" for c in cells), transform=ax.transAxes,
                        ha="right", va="bottom", fontsize=8, family="DejaVu Sans Mono", color=colour)
            ax.set_title(f"10 · {style.label(key)}, another user attacking (uid {hostile.get('attacker_uid', '?')})",
                         fontsize=11)
            ax.legend(loc="upper left", fontsize=8.5, frameon=False)
            ax.tick_params(labelleft=True)
            ax.tick_params(which="minor", labelleft=True)
        ax.set_yscale("log")
        _log_axis(ax.yaxis, _axis_us)
        ax.set_xticks(xs, [t for _, t in PERCENTILES])
        ax.set_xlim(-0.3, len(xs) - 0.7)
        ax.set_xlabel("percentile")
        ax.grid(True, which="major", alpha=0.35)
        ax.grid(True, which="minor", axis="y", alpha=0.12)
    axes[0].set_ylabel("round-trip time (log scale)")
    fig.suptitle("Round-trip latency" + (" (left) and beside a hostile user (right)" if len(panels) == 2 else "")
                 + "\n" + _subtitle(data), fontsize=10)
    _footnotes(footer, handles, labels)
    return _save(fig, plt, out / "rtt.png"), []


# ---------------------------------------------------------------- (c) the unthrottled poster

# "complete" in the unthrottled results (nbench.c) means the end marker reached every subscriber, not that nothing
# was lost: a run without it ended when nothing had arrived for a while. Losses are counted apart (_loss_notes).
HATCH_NOTE = ("Hatched, \"complete in k of n\": in the other runs the end marker did not reach every subscriber "
              "(dropped with the rest), and the run ended when nothing more arrived.")

POLICY_TEXT = {"direct": "throttled poster (direct path)", "queue:unbounded": "queue(unbounded)",
               "queue:1000": "queue(1000)", "coalesce": "coalesce", "native": "(native)"}


def _policy(p: str) -> str:
    # run.py's spelling (queue:100000) in the protocol's (queue(100000)), as BENCHMARKS.md writes it.
    if p in POLICY_TEXT:
        return POLICY_TEXT[p]
    return p.replace(":", "(") + ")" if ":" in p else p


def _range_bars(ax, ys, labels, stats, colours, hatches, texts) -> None:
    """Horizontal bars at the median, whiskers from the lowest to the highest run, and the median written out."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator
    med = [s["median"] if s else 0 for s in stats]
    lo = [max(0.0, s["median"] - s["min"]) if s else 0 for s in stats]
    hi = [max(0.0, s["max"] - s["median"]) if s else 0 for s in stats]
    ax.barh(ys, med, xerr=[lo, hi], color=colours, edgecolor="white", height=0.72,
            error_kw={"elinewidth": 1.2, "capsize": 4, "ecolor": "#222222"})
    for y, m, h in zip(ys, med, hatches):
        if h:  # hatching drawn as a second, unfilled bar: barh takes one hatch for all its bars
            ax.barh([y], [m], color="none", edgecolor="#222222", hatch=h, height=0.72, linewidth=0)
    top = max((s["max"] for s in stats if s), default=1)
    for y, s, t in zip(ys, stats, texts):
        ax.text((s["max"] if s else 0) + top * 0.02, y, t, va="center", ha="left", fontsize=8)
    ax.set_xlim(0, top * 1.45)
    ax.set_yticks(ys, labels)
    ax.set_ylim(max(ys) + 0.6, min(ys) - 0.6)  # first configuration on top
    ax.xaxis.set_major_locator(MaxNLocator(4))
    ax.xaxis.set_major_formatter(FuncFormatter(_axis_rate))
    ax.grid(True, axis="x", alpha=0.35)
    ax.set_axisbelow(True)


def _median_text(s: dict | None, r: dict, extra: str = "") -> str:
    if not s:
        return "error" if r.get("error") else "–"
    text = fmt_rate(s["median"]) + extra
    if s["median"] and s["min"] / s["median"] < 0.9:  # a cliff: the slowest run well below the median
        text += f"\nslowest run {s['min'] / s['median']:.0%} of it"
    ok = r.get("complete_runs")
    n = r.get("runs", 0) - r.get("failed_runs", 0)
    if ok is not None and ok < n:
        text += f"\ncomplete in {ok} of {n} runs"
    return text


def _incomplete(r: dict, s) -> bool:
    n_ok = r.get("runs", 0) - r.get("failed_runs", 0)
    return bool(s) and r.get("complete_runs") is not None and r["complete_runs"] < n_ok


def _loss_notes(entries) -> list[str]:
    """What was merged, dropped or lost (medians), from the results rather than from what the policies might do."""
    lossy = []
    for where, r in entries:
        parts = [f"{r[k]:,.0f} {t}" for k, t in (("merged_median", "merged"), ("dropped_median", "dropped"),
                                                  ("unaccounted_median", "lost unreported")) if r.get(k)]
        if parts:
            lossy.append(f"{where}: {', '.join(parts)}")
    if not lossy:
        return ["Nothing was merged, dropped or lost in the median run of any configuration."]
    return ["Per run (medians) — " + "; ".join(lossy) + "."]


def draw_unthrottled(plt, data: dict, out: Path, style: _Style) -> tuple[Path | None, list[str]]:
    rows = (data.get("results") or {}).get("unthrottled") or []
    rows = [r for r in rows if isinstance(r, dict) and "subscribers" in r and "system" in r]
    if not any(r.get("delivered_per_s") for r in rows):
        return None, ["unthrottled: no unthrottled-poster results in this run"
                      + (" (every row an error)" if rows else "")]
    sizes = sorted({r["subscribers"] for r in rows})
    configs = list(dict.fromkeys((r["system"], r.get("policy", "native")) for r in rows))
    labels = [f"{style.label(k)}\n{_policy(p)}" for k, p in configs]

    notes = ["Bars: median of the runs; whiskers: lowest to highest run. Throughput: notification frames "
             "received per second by all subscribers. Light bar: notifyd with a throttled poster (window 1,000), "
             "the reference. " + HATCH_NOTE]
    notes += _loss_notes([(f"S={r['subscribers']} {style.label(r['system'])} {_policy(r.get('policy') or '')}"
                           .strip(), r) for r in rows if not r.get("error")])
    notes += [f"S={r['subscribers']} {style.label(r['system'])} {r.get('policy')}: error ({str(r['error'])[:90]})"
              for r in rows if r.get("error")]
    # Systems that ran but have no rows here (skipped ones are named in the next note already).
    missing = [style.label(k) for k in ("notifyd-c", "relay", "redis")
               if ((data.get("systems") or {}).get(k) or {}).get("available") and not any(r["system"] == k for r in rows)]
    if missing:
        notes.append("No rows for: " + ", ".join(missing) + ".")
    if style.skipped():
        notes.append("Not in this run: " + "; ".join(style.skipped()) + ".")

    fig, axes, footer = _figure(plt, len(sizes), {1: 10, 2: 12}.get(len(sizes), 13.5), 0.6 * len(configs) + 1.0, 0,
                                notes, sharey=True)
    ys = list(range(len(configs)))
    for ax, n in zip(axes, sizes):
        by = {(r["system"], r.get("policy", "native")): r for r in rows if r["subscribers"] == n}
        stats, colours, hatches, texts = [], [], [], []
        for k, p in configs:
            r = by.get((k, p))
            s = r.get("delivered_per_s") if r and not r.get("error") else None
            stats.append(s)
            colours.append(_tint(style.colour(k)) if p == "direct" else style.colour(k))
            hatches.append("///" if r and _incomplete(r, s) else None)
            texts.append(_median_text(s, r) if r else "not run")
        _range_bars(ax, ys, labels, stats, colours, hatches, texts)
        posts = next((r.get("posts") for r in by.values() if r.get("posts")), None)
        ax.set_title(f"S = {n} subscriber{'s' if n != 1 else ''}" + (f" · {posts:,} posts per run" if posts else ""),
                     fontsize=10.5)
        ax.set_xlabel("delivered notifications/s")
        if ax is not axes[0]:
            ax.tick_params(labelleft=False)
    fig.suptitle("8 · Unthrottled poster (64 B, one name, no window): minimum / median / maximum over the runs\n"
                 + _subtitle(data), fontsize=10)
    _footnotes(footer)
    return _save(fig, plt, out / "unthrottled.png"), []


def draw_unthrottled_stopped(plt, data: dict, out: Path, style: _Style) -> tuple[Path | None, list[str]]:
    rows = (data.get("results") or {}).get("unthrottled_stopped") or []
    rows = [r for r in rows if isinstance(r, dict) and "system" in r]
    usable = [r for r in rows if not r.get("error") and (r.get("plain") or {}).get("delivered_per_s")]
    if not usable:
        return None, ["unthrottled_stopped: no results with a SIGSTOPped subscriber in this run"
                      + (" (every row an error)" if rows else "")]
    ys, labels, stats, colours, hatches, texts = [], [], [], [], [], []
    for i, r in enumerate(rows):
        for j, (part, title) in enumerate((("plain", "without it"), ("stopped", "with a SIGSTOPped subscriber"))):
            e = r.get(part) or {}
            s = e.get("delivered_per_s") if not r.get("error") else None
            ys.append(i * 2.6 + j)  # a gap between systems: each pair reads as one comparison
            labels.append(f"{style.label(r['system'])}\n{title}")
            stats.append(s)
            colours.append(style.colour(r["system"]) if part == "stopped" else _tint(style.colour(r["system"])))
            hatches.append("///" if _incomplete(e, s) else None)
            ratio = r.get("ratio_median")
            extra = f" ({ratio:.0%} of without)" if part == "stopped" and ratio is not None else ""
            texts.append(_median_text(s, dict(e, error=r.get("error")), extra))
    readers = usable[0].get("readers", 3)
    policies = "; ".join(f"{style.label(r['system'])}: {_policy(r['reader_policy'])} "
                         f"and {_policy(r['victim_policy'])}"
                         for r in usable if r.get("reader_policy") and r.get("victim_policy")
                         and r["reader_policy"] != "native")
    notes = [f"{readers} reading subscribers + 1 SIGSTOPped ({policies or 'each system its native behaviour'}"
             f"{', the others: their native behaviour' if policies else ''}), runs with and without it alternating "
             "on one fresh instance. Bars: median; whiskers: lowest to highest run; percentage: ratio of the "
             "medians. " + HATCH_NOTE]
    notes += _loss_notes([(f"{style.label(r['system'])} {t}", r[p]) for r in usable
                          for p, t in (("plain", "without"), ("stopped", "with")) if r.get(p)])
    notes += [f"{style.label(r['system'])}: error ({str(r['error'])[:90]})" for r in rows if r.get("error")]
    fig, axes, footer = _figure(plt, 1, 11.5, 0.55 * len(labels) + 1.0, 0, notes)
    _range_bars(axes[0], ys, labels, stats, colours, hatches, texts)
    axes[0].set_xlabel("delivered notifications/s, reading subscribers")
    fig.suptitle("9 · Unthrottled poster with a SIGSTOPped subscriber: minimum / median / maximum\n"
                 + _subtitle(data), fontsize=10)
    _footnotes(footer)
    return _save(fig, plt, out / "unthrottled_stopped.png"), []


# ---------------------------------------------------------------- entry points

DRAWERS = {"fanout": draw_fanout, "rtt": draw_rtt, "unthrottled": draw_unthrottled,
           "unthrottled_stopped": draw_unthrottled_stopped}


def missing_dependency() -> str | None:
    """Why charts cannot be drawn here (matplotlib not importable), or None."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        return f"matplotlib is not installed ({e}): python3 -m pip install matplotlib"
    return None


def draw_all(data: dict, outdir: Path) -> tuple[dict[str, Path], list[str]]:
    """Draws every chart the results have data for into outdir. Returns {name: path} of the charts drawn and
    notes on the ones left out. A chart of ours left in outdir by an earlier run and not drawn this time is
    removed, so BENCHMARKS.md never shows a picture of other results than its tables."""
    import matplotlib
    matplotlib.use("Agg")  # headless: make bench runs over SSH and in CI
    import matplotlib.pyplot as plt

    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    drawn: dict[str, Path] = {}
    notes: list[str] = []
    # rc_context: run.py's process (or a caller's) keeps its own settings; these make the charts look the same
    # whatever a machine's matplotlibrc says.
    with matplotlib.rc_context({"font.family": FONT, "font.size": 9.5, "axes.titlesize": 11,
                                "savefig.facecolor": "white", "figure.facecolor": "white",
                                "hatch.linewidth": 0.8, "axes.spines.top": False, "axes.spines.right": False}):
        for name, drawer in DRAWERS.items():
            path, why = drawer(plt, data, outdir, _Style(data))
            if path is None:
                notes += why
                stale = outdir / f"{name}.png"
                if stale.exists():
                    stale.unlink()
            else:
                drawn[name] = path
    return drawn, notes


def markdown_image(name: str, link: str) -> str:
    return f"![{ALT[name]}]({link})"


def self_test(keep: Path | None = None) -> int:
    """Synthetic results (one fan-out system with an error row, an incomplete row, no hostile scenario, an
    unthrottled configuration that failed, a skipped system) through every drawer; then results with every
    scenario missing. Checks the PNGs exist, are PNGs and are not empty, that a missing scenario draws nothing and
    says so, that a stale chart is removed, and that drawing twice gives the same bytes. keep: also draw the
    synthetic charts there, to look at."""
    def spread(m):
        return {"min": m * 0.7, "median": m, "max": m * 1.1, "n": 3}

    data = {
        "meta": {"date": "2000-01-01 00:00 UTC", "mode": "self-test", "machine": {"cpu": "test", "cores": 2,
                 "memory_gib": 1.0, "kernel": "0"}, "versions": {"notifyd": "0.0.0 (abcdef0, debug)"},
                 "load": {"load_before": [0.5, 0.4, 0.3], "competing_before": [], "samples_with_competing_builds": 0}},
        "systems": {"notifyd-c": {"label": "notifyd (C client)", "available": True, "reason": ""},
                    "relay": {"label": "C relay", "available": True, "reason": ""},
                    "redis": {"label": "Redis pub/sub", "available": False, "reason": "not installed"},
                    "notifyd-c-alt": {"label": "notifyd ALT (C client)", "available": True, "reason": ""},
                    "newcomer": {"label": "a system charts.py has no colour for", "available": True, "reason": ""}},
        "results": {
            "fanout": [{"system": k, "subscribers": s, "payload": p, "delivered_per_s": f * s ** 0.5 * (1 + p / 64) ** -0.5,
                        "complete": not (k == "relay" and s == 4 and p == 64), "runs": [f * 0.9 * s ** 0.5, f * 1.05 * s ** 0.5]
                        if p == 64 else [f]}
                       for k, f in (("notifyd-c", 8e6), ("relay", 7e6), ("notifyd-c-alt", 7.5e6), ("newcomer", 2e5))
                       for s, p in ((1, 64), (4, 64), (16, 64), (4, 0), (4, 1024))]
                      + [{"system": "relay", "subscribers": 64, "payload": 64, "error": "synthetic failure"}],
            "rtt": [{"system": "notifyd-c", "payload": 64, "runs": 2, "samples": 600, "p50_us": 50.0, "p99_us": 90.0,
                     "p999_us": 150.0, "max_us": 900.0, "p50_us_runs": [48.0, 52.0], "p99_us_runs": [85.0, 95.0]},
                    {"system": "relay", "error": "synthetic failure"}],
            "unthrottled": [{"system": k, "subscribers": s, "payload": 64, "policy": p, "runs": 3, "failed_runs": 0,
                             "complete_runs": 3 if k != "relay" else 1, "posts": 1000, "delivered_per_s": spread(m * s)}
                            for s in (1, 4) for k, p, m in (("notifyd-c", "direct", 7e6), ("notifyd-c", "coalesce", 1.2e7),
                                                            ("relay", "native", 6e6))]
                           + [{"system": "notifyd-c", "subscribers": 4, "payload": 64, "policy": "queue:1000",
                               "runs": 3, "failed_runs": 3, "error": "synthetic failure", "posts": 1000}],
            "unthrottled_stopped": [{"system": "notifyd-c", "readers": 3, "ratio_median": 0.9,
                                     "plain": {"runs": 2, "failed_runs": 0, "complete_runs": 2, "delivered_per_s": spread(2e7)},
                                     "stopped": {"runs": 2, "failed_runs": 0, "complete_runs": 2, "delivered_per_s": spread(1.8e7)}},
                                    {"system": "relay", "error": "synthetic failure"}],
        },
    }
    failures = []
    if keep is not None:
        draw_all(data, keep)
    with tempfile.TemporaryDirectory(prefix="notifyd-charts-") as tmp:
        out = Path(tmp)
        (out / "rtt.png").write_bytes(b"stale")  # must survive only if an rtt chart is drawn again (it is)
        drawn, notes = draw_all(data, out)
        for name in CHART_NAMES:
            p = out / f"{name}.png"
            if name not in drawn:
                failures.append(f"{name}: not drawn ({notes})")
            elif not p.exists() or p.stat().st_size < 5000 or p.read_bytes()[:8] != b"\x89PNG\r\n\x1a\n":
                failures.append(f"{name}: {p} missing, too small or not a PNG")
        first = {n: p.read_bytes() for n, p in drawn.items()}
        drawn_again, _ = draw_all(data, out)
        for n, p in drawn_again.items():
            if p.read_bytes() != first.get(n):
                failures.append(f"{n}: drawing the same results twice gave different bytes")

        # Only the hostile scenario (no plain round trips) still draws rtt.png; everything else is missing.
        sparse = {"meta": {}, "systems": {}, "results": {
            "hostile": {"system": "notifyd-c", "idle": {"runs": 1, "p50_us": 50, "p99_us": 80, "p999_us": 90, "max_us": 200},
                        "attacked": {"runs": 1, "p50_us": 60, "p99_us": 700, "p999_us": 900, "max_us": 2000}},
            "fanout": [{"system": "notifyd-c", "subscribers": 1, "payload": 64, "error": "synthetic"}]}}
        drawn, notes = draw_all(sparse, out)
        if keep is not None:
            draw_all(sparse, keep / "sparse")
        if set(drawn) != {"rtt"}:
            failures.append(f"sparse results: drew {sorted(drawn)}, wanted only rtt")
        for name in ("fanout", "unthrottled", "unthrottled_stopped"):
            if (out / f"{name}.png").exists():
                failures.append(f"sparse results: a stale {name}.png was left behind")
            if not any(n.startswith(name + ":") for n in notes):
                failures.append(f"sparse results: no note says why {name} was not drawn ({notes})")

        drawn, notes = draw_all({}, out)  # nothing at all: no chart, no crash
        if drawn or len(notes) != len(CHART_NAMES):
            failures.append(f"empty results: drew {sorted(drawn)}, notes {notes}")
    for f in failures:
        print(f"charts self-test: FAILED {f}", file=sys.stderr)
    print(f"charts self-test: {'ok' if not failures else f'{len(failures)} failed'}")
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="?", help="a results JSON written by Benchmarks/run.py (latest.json)")
    parser.add_argument("outdir", nargs="?", help="directory for the PNGs (created)")
    parser.add_argument("--self-test", action="store_true", help="draw synthetic results into a temporary directory")
    parser.add_argument("--keep", default=None, help="with --self-test: also leave the synthetic charts here")
    args = parser.parse_args()
    missing = missing_dependency()
    if missing and args.self_test:
        # As run.py --smoke: make test does not install matplotlib (make bench does), so its absence is reported,
        # not a failure.
        print(f"charts self-test: skipped: {missing}")
        return 0
    if missing:
        print(f"charts: {missing}", file=sys.stderr)
        return 2
    if args.self_test:
        return self_test(Path(args.keep) if args.keep else None)
    if not args.results or not args.outdir:
        parser.error("RESULTS.json and OUTDIR are needed (or --self-test)")
    data = json.loads(Path(args.results).read_text())
    drawn, notes = draw_all(data, Path(args.outdir))
    for name, path in drawn.items():
        print(f"{name}: {path}")
    for note in notes:
        print(f"not drawn: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
