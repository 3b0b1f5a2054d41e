"""``dara <command>``: the package's command line (``python -m dara`` too).

Commands:
    diagnose   density diagnostics of a multi-reward rollout table (`dara.diagnose`)
"""

from __future__ import annotations

import sys
from typing import Sequence

COMMANDS = {"diagnose": "dara.diagnose"}


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip())
        raise SystemExit(0 if args else 2)
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        raise SystemExit(f"dara: unknown command {command!r}; commands: {', '.join(COMMANDS)}")
    import importlib

    importlib.import_module(COMMANDS[command]).main(rest)


if __name__ == "__main__":
    main()
