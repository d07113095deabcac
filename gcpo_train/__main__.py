"""``python -m gcpo_train train|eval|export ...``: the `gcpo` command (gcpo_analysis.cli), one parser."""

import sys

from gcpo_analysis.cli import main

sys.exit(main())
