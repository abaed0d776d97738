"""A trainer's check of the node-local dataset cache, run in a trainer pod (``python -c`` of this file's text).

For every shard named in ``$EXPECTED_SHARDS`` (JSON ``{name: sha256}``), through the agent socket the TrainJob's
wiring mounted (``$TRAINGUARD_CACHE_SOCKET``):

- opens it with ``trainguard.cache.client.open_shards``: the agent passes the file descriptor over the socket (fd
  handoff between two pods) and the client maps it read-only;
- counts the pages already resident before this process touches any (``mincore``): they were put in the page cache
  by the agent, in another pod;
- hashes the mapping and compares with the expected sha256;
- reads the mapping's entry in ``/proc/self/smaps``: the file's inode, ``Rss``, ``Shared_*``, ``Private_*``,
  ``Anonymous``. ``Anonymous == 0`` means no page was copied (a copy of a file page is an anonymous page); shared
  (``Shared_Clean + Shared_Dirty == Rss``; "dirty" is the page-cache page not yet written back, it says nothing of a
  copy) means each page is mapped by another process too: the other trainer pod, mapping the very same page-cache
  pages (the agent unmaps what it warms, so no one else maps them). The pods start
  together but not in step, so each waits (``$SHARE_WAIT`` s at most) until its mapping is shared, and holds it
  ``$SHARE_HOLD`` s more so that the other one sees it too.

Each result is a line on stdout (``kubectl logs`` and the SDK read them); any mismatch exits 1 naming it.
``$FAIL_ON_PURPOSE`` set: print it and exit 1 (the failed-TrainJob case).
"""

import hashlib
import json
import os
import sys
import time

from trainguard.cache import pages
from trainguard.cache.client import open_shards

RANK = os.environ.get("JOB_COMPLETION_INDEX", "?")


def say(text: str) -> None:
    print(f"rank {RANK}: {text}", flush=True)


def smaps_entry(address: int) -> dict:
    """The /proc/self/smaps entry of the mapping that starts at ``address``: its inode and kB fields."""
    entry: dict = {}
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and not head[0].endswith(":"):
                if entry:
                    return entry
                start = int(head[0].split("-")[0], 16)
                if start == address:
                    entry = {"inode": int(head[4]), "path": head[5] if len(head) > 5 else ""}
            elif entry and len(head) >= 2 and head[0].endswith(":") and head[1].isdigit():
                entry[head[0][:-1]] = int(head[1])
    if not entry:
        raise SystemExit(f"rank {RANK}: no smaps entry starts at {address:#x}")
    return entry


def main() -> int:
    if os.environ.get("FAIL_ON_PURPOSE"):
        say(f"failing on purpose: {os.environ['FAIL_ON_PURPOSE']}")
        return 1
    expected = json.loads(os.environ["EXPECTED_SHARDS"])
    wait, hold = float(os.environ.get("SHARE_WAIT", "60")), float(os.environ.get("SHARE_HOLD", "5"))
    say(f"socket {os.environ.get('TRAINGUARD_CACHE_SOCKET')} dataset {os.environ.get('TRAINGUARD_DATASET')}")
    problems: list[str] = []
    shards = list(open_shards(sorted(expected)))
    try:
        for shard in shards:
            name = shard.info.name
            if shard.source != "agent":
                problems.append(f"{name}: opened {shard.source}, not through the agent")
            view = shard.view
            address, length = pages.buffer_address(view)
            total = (length + pages.PAGE_SIZE - 1) // pages.PAGE_SIZE
            resident_before = sum(pages.resident_pages(shard._mapping))  # noqa: SLF001 - measured before any read
            digest = hashlib.sha256(view).hexdigest()
            if digest != expected[name]:
                problems.append(f"{name}: sha256 {digest} != expected {expected[name]}")
            say(f"shard {name} bytes {length} sha256 {digest} resident-before-read {resident_before}/{total} pages")
        deadline = time.monotonic() + wait
        while True:
            entries = {s.info.name: smaps_entry(pages.buffer_address(s.view)[0]) for s in shards}
            shared = all(e["Shared_Clean"] + e["Shared_Dirty"] == e["Rss"] > 0 for e in entries.values())
            if shared or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        for name, e in sorted(entries.items()):
            say(f"smaps {name} inode {e['inode']} Rss {e['Rss']} kB "
                f"Shared {e['Shared_Clean'] + e['Shared_Dirty']} kB "
                f"Private {e['Private_Clean'] + e['Private_Dirty']} kB Anonymous {e['Anonymous']} kB")
            if e["Anonymous"]:
                problems.append(f"{name}: {e['Anonymous']} kB of the mapping are anonymous (copied) pages")
        if not shared:
            problems.append(f"the mappings were not shared with another process within {wait} s")
        else:
            say(f"every shard mapping is shared with another process; holding {hold} s")
            time.sleep(hold)
    finally:
        for shard in shards:
            shard.close()
    for p in problems:
        say(f"FAILED {p}")
    if problems:
        return 1
    say(f"TRAINER OK {len(expected)} shards verified")
    return 0


sys.exit(main())
