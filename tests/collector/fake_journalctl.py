"""A stand-in for journalctl, run as an executable by the journal reader's tests (standard library only).

It serves the entries of a file of `journalctl -o json` lines (FAKE_JOURNAL) as journalctl(1) does for
the options the reader uses: `-o json`, `--no-pager`, `-D DIR`, `-b` (the boot in FAKE_BOOT_ID), `-k`
(which implies `-b` and adds the match `_TRANSPORT=kernel`), `--after-cursor=C` (entries after C's
sequence number, so a cursor whose entry is gone still finds its place), `-n N` (the last N) and
FIELD=VALUE matches. Lines are printed as stored, so a MESSAGE kept as an array of bytes stays one.
FAKE_JOURNAL_DENY=1 answers as journalctl does to a user outside the systemd-journal and adm groups:
no entries, exit 0, a hint on stderr. Each run's arguments are appended to FAKE_JOURNAL_CALLS.
"""

from __future__ import annotations

import json
import os
import sys

HINT = (
    "Hint: You are currently not seeing messages from other users and the system.\n"
    "      Users in groups 'adm', 'systemd-journal' can see all messages.\n"
    "      Pass -q to turn off this notice.\n"
)


def _seqnum(cursor: str) -> int:
    fields = dict(part.split("=", 1) for part in cursor.split(";") if "=" in part)
    return int(fields["i"], 16)


def main(argv: list[str]) -> int:
    if calls := os.environ.get("FAKE_JOURNAL_CALLS"):
        with open(calls, "a") as f:
            f.write(json.dumps(argv) + "\n")
    if os.environ.get("FAKE_JOURNAL_DENY") == "1":
        sys.stderr.write(HINT)
        return 0
    matches: dict[str, str] = {}
    boot = after = None
    last_n = None
    args = iter(argv)
    for a in args:
        if a in ("-o", "-D"):
            next(args)
        elif a in ("-k", "--dmesg"):
            boot, matches["_TRANSPORT"] = os.environ["FAKE_BOOT_ID"], "kernel"
        elif a == "-b":
            boot = os.environ["FAKE_BOOT_ID"]
        elif a.startswith("--after-cursor="):
            after = _seqnum(a.split("=", 1)[1])
        elif a == "-n":
            last_n = int(next(args))
        elif "=" in a and not a.startswith("-"):
            key, value = a.split("=", 1)
            matches[key] = value
    with open(os.environ["FAKE_JOURNAL"]) as f:
        lines = [line for line in f if line.strip()]
    shown = []
    for line in lines:
        entry = json.loads(line)
        if boot is not None and entry["_BOOT_ID"] != boot:
            continue
        if after is not None and _seqnum(entry["__CURSOR"]) <= after:
            continue
        if any(entry.get(k) != v for k, v in matches.items()):
            continue
        shown.append(line)
    if last_n is not None:
        shown = shown[-last_n:] if last_n else []
    sys.stdout.write("".join(shown))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
