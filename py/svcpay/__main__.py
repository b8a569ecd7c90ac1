"""`svcpay` (the console script) and `python -m svcpay`: Ctrl-C and SIGTERM request a stop
(svcpay.stopping) from before the CLI's imports, which take a second or more, so one that
comes during them ends the command with 130 like any other, not with a traceback."""

from __future__ import annotations

import sys

from svcpay import stopping


def main() -> int:
    with stopping.handling():
        from svcpay.cli import main as cli_main

        code = cli_main()
    stopping.finished()  # a signal from here on changes nothing: the work is done
    return code


if __name__ == "__main__":
    sys.exit(main())
