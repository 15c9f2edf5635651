"""`python -m worker` is the `scorestream` command."""

import sys

from worker.commands.cli import main

sys.exit(main())
