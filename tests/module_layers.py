#!/usr/bin/env python3
"""Checks the module layering of docs/architecture.md: a module's sources and public headers
include only modules of lower layers (config and key, one layer, include each other).
Usage: module_layers.py SOURCE_DIR. Exits 1 naming every include that breaks a layer."""
import pathlib
import re
import sys

LAYERS = [["core"], ["config", "key", "io"], ["limiter", "redis", "upstream", "metrics"],
          ["store"], ["http"], ["app"]]
LAYER = {module: i for i, modules in enumerate(LAYERS) for module in modules}
INCLUDE = re.compile(r'#include\s+"(?:sluice/)?([a-z_]+)/')


def main(root):
    root = pathlib.Path(root)
    problems = []
    for module, layer in LAYER.items():
        for folder in (root / "src" / module, root / "include" / "sluice" / module):
            for path in sorted(folder.glob("*.[ch]pp")):
                for number, line in enumerate(path.read_text().splitlines(), 1):
                    match = INCLUDE.match(line)
                    if not match or match.group(1) not in LAYER or match.group(1) == module:
                        continue
                    other = match.group(1)
                    if LAYER[other] >= layer and not {module, other} == {"config", "key"}:
                        problems.append(f"{path.relative_to(root)}:{number}: {module} (layer "
                                        f"{layer}) includes {other} (layer {LAYER[other]})")
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
