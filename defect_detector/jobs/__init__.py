"""Jobs: what takes frames through the frame path (``inspect/``) for a purpose, one module per job: ``teach`` (program a
design from its golden image and good boards, with ``teach_good``, ``teach_point``, ``teach_sets``, ``teach_tune``),
``rejections`` (the operators' verdicts applied to taught weights), ``calibrate`` (a drift baseline) and ``validate``
(``val``). DESIGN.md's ``jobs/`` room: above ``inspect/``, below ``cli/``."""
