"""The `defect-detector` command line: one module per subcommand (``main.py`` dispatches, ``parser.py`` parses)."""
