"""Run a bench script of this checkout with `widebeam` imported from another tree.

A before/after of engine code in one device call: the same bench script, the same carried
wheels and model cache, only the package differs. TREE holds the other checkout's `widebeam/`
and `services/` folders (e.g. `git archive BASE widebeam services | tar -x -C .before`, carried
with the call); the script runs as `__main__` from bench/, after `widebeam` and
`widebeam.services` are loaded from TREE (`step_host.import_package_from`), and the first line
printed names the folder they came from.

    cd bench && python3 with_tree.py ../.before genrec_throughput.py --quick --quantization fp8
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

from step_host import import_package_from


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        raise SystemExit("usage: with_tree.py TREE SCRIPT [ARGS...]")
    tree, script = Path(argv[0]).resolve(), Path(argv[1])
    missing = [name for name in ("widebeam", "services") if not (tree / name).is_dir()]
    if missing:
        raise SystemExit(f"{tree} has no {' or '.join(f'{name}/' for name in missing)} folder")
    if not script.is_file():
        raise SystemExit(f"no bench script {script}")
    import_package_from(tree)
    import widebeam

    print(f"widebeam from {Path(widebeam.__file__).parent}", flush=True)
    sys.argv = [str(script), *argv[2:]]
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
