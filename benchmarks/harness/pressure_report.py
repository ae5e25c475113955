"""The windows and tables of ``benchmarks/pressure.py``: one line per window, a summary per
phase (baseline / pressure / recovery), and the markdown table of every session."""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psycopg

from .brokers import PG_URL
from .pressure_load import catalogs
from .session import percentile_or_none

PHASES = ("baseline", "pressure", "recovery")


@dataclass
class Window:
    phase: str
    start: float
    end: float
    offered: float  # tasks published/s in the window
    done: float  # tasks started/s (the task is a no-op: started = finished)
    p50: float | None  # pickup latency, ms
    p99: float | None
    latencies: list[float]
    published: int
    backlog: int  # published − run, at the window's end
    lag: float  # how far the publisher is behind its schedule, s
    tables: dict[str, tuple[int, int, int]]  # table → (dead, live, bytes)
    pg_cpu: float  # cores: every postgres process
    broker_cpu: float  # cores: the broker's client backends
    reader_cpu: float  # cores: the pressure sessions' backends
    scan_ms: float | None  # readers' median scan time
    vacuums: list[str] = field(default_factory=list)
    truncates: int = 0  # tables truncated in the window (alkstore: rotations)
    catalog: tuple[int, int] = (0, 0)  # pg_class's (dead rows, bytes) at the window's end
    waits: list[tuple[str, int]] = field(default_factory=list)
    cpu_now: dict[int, float] = field(default_factory=dict)

    def as_dict(self) -> dict:
        d = asdict(self)
        del d["cpu_now"]
        return d


def cpu_by_pid() -> dict[int, float]:
    """pid → CPU seconds (user+system) of every live ``postgres`` process (/proc)."""
    out, hz = {}, os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        lp, rp = stat.index("("), stat.rindex(")")
        if stat[lp + 1 : rp] != "postgres":
            continue
        fields = stat[rp + 2 :].split()
        out[int(entry)] = (int(fields[11]) + int(fields[12])) / hz
    return out


CATALOG_BLOAT = 100_000  # dead catalog rows past which a run's latency is not comparable


def machine_note(args) -> str:
    """What the run stood on: CPUs, load, the server's version and vacuum settings."""
    try:
        with psycopg.connect(PG_URL, autocommit=True, connect_timeout=10) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]
            settings = dict(
                conn.execute(
                    "SELECT name, setting FROM pg_settings WHERE name IN ('autovacuum', "
                    "'idle_in_transaction_session_timeout', 'shared_buffers', "
                    "'max_connections', 'synchronous_commit')"
                ).fetchall()
            )
            catalog = catalogs(conn, ("pg_attribute", "pg_class"))
    except psycopg.Error as exc:
        version, settings, catalog = f"unreachable ({exc})", {}, {}
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    vac = "on" if settings.get("autovacuum") == "on" else "OFF"
    lines = [
        f"# pressure benchmark, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
        f"# machine: {os.cpu_count()} CPUs, load average {load} (shared with other work)",
        f"# PostgreSQL {version}: autovacuum = {vac}"
        + (" (dead tuples stay unless --vacuum-like-autovacuum)" if vac == "OFF" else "")
        + f"; settings {settings}",
        "# catalogs: "
        + ", ".join(
            f"{name} {dead:,} dead rows ({size / 1e6:.1f} MB)"
            for name, (dead, size) in catalog.items()
        )
        + (
            f" — BLOATED (over {CATALOG_BLOAT:,} dead rows): lookups read through them while a "
            "pin keeps them; VACUUM the catalogs for figures comparable with a fresh server"
            if any(dead > CATALOG_BLOAT for dead, _ in catalog.values())
            else ""
        ),
        f"# offered {args.rate:g} tasks/s; baseline {args.baseline:g} s, pressure "
        f"{args.hold:g} s, recovery {args.recovery:g} s, {args.window:g} s windows"
        + ("; VACUUM on autovacuum's thresholds" if args.vacuum_like_autovacuum else ""),
    ]
    return "\n".join(lines)


def _fmt(v: float | None, spec: str = ".0f") -> str:
    return "-" if v is None else format(v, spec)


def _top_tables(tables: dict, n: int = 2) -> str:
    top = sorted(tables.items(), key=lambda kv: -kv[1][0])[:n]
    return ",".join(f"{name}:{dead}" for name, (dead, _, _) in top)


def window_header() -> str:
    return (
        f"{'t':>6} {'phase':<8} {'offer/s':>7} {'done/s':>6} {'p50ms':>6} {'p99ms':>7} "
        f"{'backlog':>7} {'lag s':>5} {'MB':>6} {'pgCPU':>5} {'brkCPU':>6} {'rdCPU':>5} "
        f"{'scanms':>6} {'trunc':>5}  dead (top tables); waits; vacuums"
    )


def print_window(w: Window) -> None:
    mb = sum(t[2] for t in w.tables.values()) / 1e6
    waits = ",".join(f"{k}×{n}" for k, n in w.waits)
    print(
        f"{w.end:6.0f} {w.phase:<8} {w.offered:7.1f} {w.done:6.1f} {_fmt(w.p50, '.1f'):>6} "
        f"{_fmt(w.p99, '.1f'):>7} {w.backlog:7d} {w.lag:5.2f} {mb:6.1f} {w.pg_cpu:5.2f} "
        f"{w.broker_cpu:6.2f} {w.reader_cpu:5.2f} {_fmt(w.scan_ms, '.1f'):>6} {w.truncates:5d}  "
        f"{_top_tables(w.tables)}; {waits or '-'}; {' '.join(w.vacuums) or '-'}",
        flush=True,
    )


def _recovered_after(windows: list[dict], base: dict, rate: float) -> float | None:
    """Seconds from the pressure's end to the first recovery window from which every later
    one has p99 ≤ 2× baseline p99 and backlog ≤ max(2× baseline's max, 0.5 s of load)."""
    rec = [w for w in windows if w["phase"] == "recovery"]
    if not rec or base.get("p99") is None:
        return None
    limit_backlog = max(2 * base["backlog_max"], 0.5 * rate)
    good = [
        (w["p99"] is not None and w["p99"] <= 2 * base["p99"]) and w["backlog"] <= limit_backlog
        for w in rec
    ]
    for i in range(len(rec)):
        if all(good[i:]):
            return rec[i]["start"] - rec[0]["start"]
    return None


def summarize(result: dict, args) -> dict:
    """Per phase: offered and done rates, completion, latency, backlog, tables, CPU."""
    out: dict = {}
    windows = result["windows"]
    for phase in PHASES:
        ws = [w for w in windows if w["phase"] == phase]
        if not ws:
            continue
        span = ws[-1]["end"] - ws[0]["start"]
        offered = sum(w["offered"] * (w["end"] - w["start"]) for w in ws)
        done = sum(w["done"] * (w["end"] - w["start"]) for w in ws)
        lat = sorted(x for w in ws for x in w["latencies"])
        last = ws[-1]["tables"]
        scans = [w["scan_ms"] for w in ws if w["scan_ms"] is not None]
        waits: dict[str, int] = {}
        for w in ws:
            for k, n in w["waits"]:
                waits[k] = waits.get(k, 0) + n
        out[phase] = {
            "seconds": span,
            "offered": offered / span,
            "done": done / span,
            "completion": 100 * done / offered if offered else None,
            "p50": percentile_or_none(lat, 50),
            "p99": percentile_or_none(lat, 99),
            "backlog_max": max(w["backlog"] for w in ws),
            "backlog_end": ws[-1]["backlog"],
            "lag_max": max(w["lag"] for w in ws),
            "dead_end": {k: v[0] for k, v in last.items() if v[0]},
            "mb_end": sum(v[2] for v in last.values()) / 1e6,
            "pg_cpu": sum(w["pg_cpu"] for w in ws) / len(ws),
            "broker_cpu": sum(w["broker_cpu"] for w in ws) / len(ws),
            "reader_cpu": sum(w["reader_cpu"] for w in ws) / len(ws),
            "scan_ms": (scans[0], scans[-1]) if scans else None,
            "waits": sorted(waits.items(), key=lambda kv: -kv[1])[:3],
            "vacuums": sum(len(w["vacuums"]) for w in ws),
            "truncates": sum(w.get("truncates", 0) for w in ws),
            "catalog_end": tuple(ws[-1].get("catalog", (0, 0))),
        }
    if "baseline" in out:
        out["recovered_after"] = _recovered_after(windows, out["baseline"], args.rate)
    out["lost"] = result["published"] - result["unique"]
    out["duplicates"] = result["finished"] - result["unique"]
    return out


def summary_markdown(results: list[dict], args) -> str:
    """One table: a row per broker, pressure kind and phase."""
    head = (
        "| broker | pressure | phase | offered/s | done/s | completion | p50 / p99 ms | "
        "backlog max (end) | dead tuples at end (top tables) | MB | PG CPU (broker; readers) |"
    )
    rows = [head, "|" + "---|" * 11]
    notes = []
    for r in results:
        if "failed" in r:
            rows.append(f"| {r['broker']} | {r['kind']} | FAILED: {r['failed']} |" + " |" * 8)
            continue
        s = r["summary"]
        for phase in PHASES:
            ph = s.get(phase)
            if ph is None:
                continue
            dead = ", ".join(
                f"{k} {v:,}" for k, v in sorted(ph["dead_end"].items(), key=lambda kv: -kv[1])[:2]
            )
            cpu = f"{ph['pg_cpu']:.2f} ({ph['broker_cpu']:.2f}"
            cpu += f"; {ph['reader_cpu']:.2f})" if ph["reader_cpu"] else ")"
            rows.append(
                f"| {r['broker']} | {r['kind']} | {phase} | {ph['offered']:.1f} | "
                f"{ph['done']:.1f} | {_fmt(ph['completion'], '.1f')} % | "
                f"{_fmt(ph['p50'], '.1f')} / {_fmt(ph['p99'], '.1f')} | "
                f"{ph['backlog_max']:,} ({ph['backlog_end']:,}) | {dead or '0'} | "
                f"{ph['mb_end']:.1f} | {cpu} |"
            )
        rec = s.get("recovered_after")
        extra = []
        pr = s.get("pressure", {})
        if pr.get("scan_ms"):
            extra.append(
                f"readers' scan {pr['scan_ms'][0]:.1f} → {pr['scan_ms'][1]:.1f} ms (median of "
                "the first and last window)"
            )
        if pr.get("waits"):
            extra.append(
                "top waits under pressure: " + ", ".join(f"{k} {n}" for k, n in pr["waits"])
            )
        if any(s.get(phase, {}).get("truncates") for phase in PHASES):
            extra.append(
                "tables truncated (rotations) per phase: "
                + ", ".join(
                    f"{phase} {s[phase]['truncates']:,} in {s[phase]['seconds']:.0f} s"
                    for phase in PHASES
                    if phase in s
                )
            )
        if any(s.get(phase, {}).get("catalog_end", (0, 0))[0] for phase in PHASES):
            extra.append(
                "pg_class at each phase's end: "
                + ", ".join(
                    f"{phase} {s[phase]['catalog_end'][0]:,} dead rows "
                    f"({s[phase]['catalog_end'][1] / 1e6:.1f} MB)"
                    for phase in PHASES
                    if phase in s
                )
            )
        if pr.get("lag_max"):
            extra.append(f"publisher's max lag {pr['lag_max']:.2f} s")
        notes.append(
            f"- {r['broker']} / {r['kind']}: back to baseline "
            + (f"{rec:.0f} s after the pressure" if rec is not None else "not within the recovery")
            + f"; published {r['published']:,}, lost {s['lost']}, duplicates {s['duplicates']}"
            + (
                f", drained {r['drain_seconds']:.1f} s after the end"
                if r["drain_seconds"] is not None
                else ", NOT drained at the timeout"
            )
            + ("; " + "; ".join(extra) if extra else "")
            + ("; " + "; ".join(r["notes"]) if r["notes"] else "")
        )
    return "\n".join(rows + [""] + notes)
