"""``python -m defect_detector.cli``: the same as ``defect-detector``."""

import sys

from defect_detector.cli.main import main

sys.exit(main())
