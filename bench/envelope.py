"""The cost of the message envelope: encoding, decoding and re-encoding one message.

    python bench/envelope.py [--repeat 7] [--no-import]

Times, with ``timeit`` (best of ``--repeat`` runs, µs per call), for a small payload and a
10 KB one: ``encode`` (a first dispatch: ``encode_message``), ``fetch`` (what a runner does
with an entry it reads: ``decode_fields``), ``decode`` (``decode_message``, the whole
``TaskMessage``) and ``retry`` (``reencode_for_retry`` of a decoded message, its stored
payload copied verbatim). Then what importing trunner costs (``-X importtime`` and the
peak RSS of a fresh interpreter), with and without msgspec loaded. It imports the
envelope from where this revision keeps it, so the same script measures an older one too.
No Redis, no runner: micro-benchmarks only (``bench/run.py`` has the scenarios).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import timeit
from typing import Any

try:
    from trunner._wire.decode import decode_fields, decode_message
    from trunner._wire.envelope import NO_SIZE_LIMIT, encode_message, reencode_for_retry
except ImportError:  # a revision before the envelope moved
    from trunner.message import (  # type: ignore[attr-defined, no-redef]
        NO_SIZE_LIMIT,
        decode_fields,
        decode_message,
        encode_message,
        reencode_for_retry,
    )

NOW = 1764412800.1234

PAYLOADS: dict[str, Any] = {
    "small": {"to": "a@example.com", "n": 1},
    "10KB": {
        "items": [
            {"id": i, "name": f"item number {i}", "price": i * 1.25, "tags": ["a", "b"], "ok": True}
            for i in range(135)
        ]
    },
}


def best_us(stmt: Any, repeat: int) -> float:
    """The best time of one call of ``stmt``, in µs."""
    timer = timeit.Timer(stmt)
    number, _ = timer.autorange()
    return min(timer.repeat(repeat, number)) / number * 1e6


def codec_figures(repeat: int) -> list[dict[str, Any]]:
    rows = []
    for name, payload in PAYLOADS.items():
        data = encode_message(
            "send_email", payload, enqueued_at=NOW, max_bytes=NO_SIZE_LIMIT, headers={"h": "v"}
        )
        fields = [b"payload", data]
        message = decode_message("1764412800123-0", fields)
        row = {"payload": name, "bytes": len(data)}
        row["encode_us"] = best_us(
            lambda p=payload: encode_message(
                "send_email", p, enqueued_at=NOW, max_bytes=NO_SIZE_LIMIT, headers={"h": "v"}
            ),
            repeat,
        )
        row["fetch_us"] = best_us(
            lambda f=fields: decode_fields("1764412800123-0", f, 1, None),
            repeat,
        )
        row["decode_us"] = best_us(
            lambda f=fields: decode_message("1764412800123-0", f),
            repeat,
        )
        row["retry_us"] = best_us(
            lambda m=message: reencode_for_retry(m, 2, NO_SIZE_LIMIT),
            repeat,
        )
        rows.append(row)
    return rows


#: RSS from /proc (ru_maxrss would carry the spawning process's peak across exec).
_PROBE = """
import sys
{imports}
rss = [line for line in open("/proc/self/status") if line.startswith("VmRSS:")][0]
print(rss.split()[1], "msgspec" in sys.modules)
"""


def import_figures(runs: int = 7) -> dict[str, Any]:
    """RSS (KiB, median of ``runs`` fresh interpreters) of a bare interpreter, after
    ``import trunner``, and after also importing msgspec; the import times of trunner and
    of msgspec alone (-X importtime, cumulative µs, median)."""

    def rss(imports: str) -> tuple[int, bool]:
        found = []
        for _ in range(runs):
            out = subprocess.run(
                [sys.executable, "-c", _PROBE.format(imports=imports)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            found.append((int(out[0]), out[1] == "True"))
        found.sort()
        return found[len(found) // 2]

    def import_time(module: str) -> int:
        times = []
        for _ in range(runs):
            err = subprocess.run(
                [sys.executable, "-X", "importtime", "-c", f"import {module}"],
                capture_output=True,
                text=True,
                check=True,
            ).stderr
            last = [line for line in err.splitlines() if line.rstrip().endswith(f"| {module}")]
            times.append(int(last[-1].split("|")[1]))
        return sorted(times)[len(times) // 2]

    bare_rss, _ = rss("")
    trunner_rss, loads_msgspec = rss("import trunner")
    with_msgspec_rss, _ = rss("import trunner, msgspec")
    return {
        "import_trunner_us": import_time("trunner"),
        "import_msgspec_us": import_time("msgspec"),
        "trunner_loads_msgspec": loads_msgspec,
        "rss_bare_kib": bare_rss,
        "rss_trunner_kib": trunner_rss,
        "rss_trunner_and_msgspec_kib": with_msgspec_rss,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--no-import", action="store_true", help="skip the import figures")
    args = parser.parse_args()
    for row in codec_figures(args.repeat):
        print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}))
    if not args.no_import:
        print(json.dumps(import_figures()))


if __name__ == "__main__":
    main()
