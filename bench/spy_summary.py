"""Where each process' host time goes, from a py-spy raw profile of a bench run.

    py-spy record --subprocesses --threads --gil --format raw -o run.spy -- python3 stack.py ...
    python bench/spy_summary.py run.spy [--top 25]

py-spy's raw format is one collapsed stack per line, `frame;frame;... count`, the outermost
frame first (with --subprocesses a `process PID:"command"` frame, with --threads a `thread`
frame). For each process (named by its command) and thread this prints the samples, the
functions that were on top of the stack most often (self time) and the project's functions
that were anywhere on it most often (inclusive time). With --gil only samples of the thread
that held the GIL are kept, so a process' samples show what kept its GIL busy.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter, defaultdict
from pathlib import Path

# a command line may hold ';' (a spawned child's `-c` code): process frames are cut out first
PROCESS = re.compile(r'process (\d+):"([^"]*)";?')
THREAD = re.compile(r"^thread \((\w+)\)(?:: (.*))?$")
OWN_CODE = ("widebeam/", "services/")


def process_name(pid: str, command: str) -> str:
    """A short name for a process from its command line (spawned children, such as the
    decoder's API processes, are named by their parent's command: the pid tells them apart)."""
    words = command.split()
    if "spawn_main" in command:
        return f"spawned child {pid}"
    for marker in ("decoder", "gateway", "catalog"):
        if marker in words:
            return f"{marker} {pid}"
    return f"{Path(words[1]).name if len(words) > 1 else command[:40]} {pid}"


def summarize(path: Path, top: int) -> str:
    samples: dict[tuple[str, str], int] = Counter()
    own: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    leaf: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        processes = PROCESS.findall(stack)  # outermost first: the innermost is the sampled one
        key_process = process_name(*processes[-1]) if processes else "-"
        names = []
        key_thread = "-"
        for frame in PROCESS.sub("", stack).split(";"):
            if match := THREAD.match(frame):
                key_thread = match.group(2) or match.group(1)
            else:
                names.append(frame)
        key = (key_process, key_thread)
        samples[key] += count
        if names:
            leaf[key][names[-1]] += count
        for name in dict.fromkeys(n for n in names if any(m in n for m in OWN_CODE)):
            own[key][name] += count
    lines = []
    for key, total in sorted(samples.items(), key=lambda kv: -kv[1]):
        lines.append(f"\n## {key[0]} / thread {key[1]}: {total} samples")
        lines.append("self:")
        lines += [f"  {n:6d} {100 * n / total:5.1f}%  {f}" for f, n in leaf[key].most_common(top)]
        lines.append("inclusive (the project's functions):")
        lines += [f"  {n:6d} {100 * n / total:5.1f}%  {f}" for f, n in own[key].most_common(top)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    print(summarize(args.profile, args.top))


if __name__ == "__main__":
    main()
