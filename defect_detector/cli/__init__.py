"""The `defect-detector` command line: one module per subcommand (``main.py`` dispatches, ``parser.py`` parses).

:data:`STARTED` is when the command began, before its imports: a command that promises a time (``teach --minutes``)
counts from here, as the user's clock does."""

import time

STARTED = time.perf_counter()
"""``time.perf_counter()`` when the command line package was first imported (the command's start)."""
