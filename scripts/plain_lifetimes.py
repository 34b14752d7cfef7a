#!/usr/bin/env python3
"""What knowing each block's lifetime would buy a pool of plain segments: an offline study, not
a pool. Replays traces through one simple placement in three ways and prints peak reserved /
peak live for each.

The placement: plain segments, each a device allocation rounded up to 2 MiB and given back the
moment its last block is freed. A request takes the tightest free hole in a segment; where no
hole holds it, a new segment is made, sized by rocmguard's medium rule for requests of 1-10 MiB
(the fewest of that size that waste at most 1/16, up to 20 MiB) and by its own size otherwise.
The three ways differ only in which hole is tried first:
  blind      any hole: no lifetime is known (what the hooks know);
  known      first a hole in a segment whose live blocks all outlive the request (the free event
             is read from the trace ahead of time), so that it never keeps a segment longer;
             then any hole;
  predicted  the same, the lifetime guessed as that of the last freed block of the same size
             (a size not yet freed: guessed to live as long as the trace).
No near or tile rule, no cache of idle segments, no small pool: rocmguard's own figures are the
README's corpus table.

Usage: python3 scripts/plain_lifetimes.py data/traces/unet_infer.csv.gz [...]
"""

import csv
import gzip
import sys

MIB = 1 << 20
SEGMENT = 2 * MIB
WAYS = ("blind", "known", "predicted")


def round_up(n, to):
    return -(-n // to) * to


def medium_segment(size):
    """rocmguard's medium rule (pool/alloc.rs `medium_segment`), or the request's own segment."""
    if not MIB < size <= 10 * MIB:
        return round_up(size, SEGMENT)
    counts = [(k * size, round_up(k * size, SEGMENT)) for k in range(1, 21)]
    counts = [c for c in counts if c[1] <= 20 * MIB] or [(size, round_up(size, SEGMENT))]
    close = [c for c in counts if (c[1] - c[0]) * 16 <= c[1]]
    return close[0][1] if close else min(counts, key=lambda c: (c[1] - c[0]) / c[1])[1]


def load(path):
    """[(size, index of its free event or None)] for allocations, [index of the allocation] for
    frees, in trace order."""
    events, open_ = [], {}
    with gzip.open(path, "rt", newline="") as f:
        for row in csv.DictReader(f):
            if row["Action"] == "allocate":
                open_[row["Pointer"]] = len(events)
                events.append([round_up(int(row["Size"]), 256), None])
            elif row["Action"] == "free" and row["Pointer"] in open_:
                j = open_.pop(row["Pointer"])
                events[j][1] = len(events)
                events.append(j)
    return events


class Segment:
    def __init__(self, size):
        self.size, self.blocks = size, {}  # offset -> (size, death)

    def holes(self):
        at = 0
        for off in sorted(self.blocks):
            if off > at:
                yield at, off - at
            at = off + self.blocks[off][0]
        if at < self.size:
            yield at, self.size - at


def replay(events, way):
    """Peak reserved / peak live of `events` placed the `way` given."""
    never = len(events) + 1
    lifetime, segments, where = {}, [], {}
    reserved = live = peak_reserved = peak_live = 0
    for i, e in enumerate(events):
        if isinstance(e, int):
            segment, off = where.pop(e)
            size = segment.blocks.pop(off)[0]
            live -= size
            lifetime[size] = i - e
            if not segment.blocks:
                segments.remove(segment)
                reserved -= segment.size
            continue
        size, freed = e
        death = {"known": freed or never, "predicted": i + lifetime.get(size, never)}.get(way, never)
        live += size
        peak_live = max(peak_live, live)
        found = None
        for outlived_only in (True, False) if way != "blind" else (False,):
            holes = ((h, s, off) for s in segments
                     if not outlived_only or min(d for _, d in s.blocks.values()) >= death
                     for off, h in s.holes() if h >= size)
            found = min(holes, key=lambda t: t[0], default=None)
            if found:
                break
        if found:
            _, segment, off = found
        else:
            segment, off = Segment(medium_segment(size)), 0
            segments.append(segment)
            reserved += segment.size
            peak_reserved = max(peak_reserved, reserved)
        segment.blocks[off] = (size, death)
        where[i] = (segment, off)
    return peak_reserved / peak_live


def main():
    print(f"{'trace':24s} " + " ".join(f"{w:>9s}" for w in WAYS))
    for path in sys.argv[1:]:
        events = load(path)
        ratios = [replay(events, way) for way in WAYS]
        print(f"{path.split('/')[-1].removesuffix('.csv.gz'):24s} " + " ".join(f"{r:9.3f}" for r in ratios), flush=True)


if __name__ == "__main__":
    main()
