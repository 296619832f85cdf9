"""Where a kernel's warps wait, by SASS instruction: reads the source page of an ncu report
(`ncu --import R.ncu-rep --page source --print-source sass --csv`, taken with
`--section SourceCounters`) and prints the stall samples summed by opcode (the
instruction's first word, its modifiers dropped) and the instructions with the most
samples. An mbarrier wait (SYNCS), a named barrier (BAR), a wgmma wait (WARPGROUP.DEPBAR)
or a global load's consumer then says which phase of the kernel the time goes to.
--executed keeps the instructions that ran exactly those numbers of times (warp-level): in
a warp-specialised kernel each role's loop body runs a count of its own (blocks × steps ×
the role's warps), so one role's samples are told apart from the others'.

    python3 bench/ncu_sass_summary.py source.csv [--top 25] [--executed 524288,...]
"""
import argparse
import collections
import csv


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--executed", default="",
                        help="comma-separated execution counts to keep (default: all)")
    args = parser.parse_args()
    counts = {float(x) for x in args.executed.split(",") if x}
    with open(args.csv, newline="") as f:
        rows = [r for r in csv.reader(f)]
    header_at = next(i for i, r in enumerate(rows) if "Source" in r)
    header = rows[header_at]
    source = header.index("Source")
    samples = next(i for i, name in enumerate(header) if name.startswith("Warp Stall Sampling (All"))
    not_issued = next((i for i, name in enumerate(header)
                       if name.startswith("Warp Stall Sampling (Not")), None)
    executed = header.index("Instructions Executed") if counts else None
    by_opcode = collections.Counter()
    waits = collections.Counter()
    lines = []
    for r in rows[header_at + 1:]:
        if len(r) <= max(source, samples):
            continue
        text = r[source].strip()
        words = text.split()
        if not words or (counts and number(r[executed]) not in counts):
            continue
        op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
        n = number(r[samples])
        by_opcode[op.split(".")[0]] += n
        if not_issued is not None:
            waits[op.split(".")[0]] += number(r[not_issued])
        lines.append((n, text))
    total = sum(by_opcode.values()) or 1.0
    print(f"{'opcode':24s} {'samples':>10s} {'share':>7s} {'not issued':>11s}")
    for op, n in by_opcode.most_common(args.top):
        print(f"{op:24s} {n:10.0f} {n / total:7.1%} {waits[op]:11.0f}")
    print(f"\nthe {args.top} instructions with the most samples (of {total:.0f}):")
    for n, text in sorted(lines, reverse=True)[:args.top]:
        print(f"{n:8.0f} {n / total:6.1%}  {text[:100]}")


if __name__ == "__main__":
    main()
