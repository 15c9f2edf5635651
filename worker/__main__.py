"""`python -m worker` is the `scorestream` command."""

import sys

from worker.cli import main

sys.exit(main())
