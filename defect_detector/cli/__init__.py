"""The `defect-detector` command line: one module per subcommand (``main.py`` dispatches, ``parser.py`` parses).

:data:`STARTED` is when the command began, before its imports: a command that promises a time (``teach --minutes``)
counts from here when run from the shell, as the user's clock does (``main.py`` hands it on as ``args.started``; a
call of ``main(argv)`` from Python counts from the call)."""

import time

STARTED = time.perf_counter()
"""``time.perf_counter()`` when the command line package was first imported (a shell command's start)."""
