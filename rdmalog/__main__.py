"""`python -m rdmalog` is the `rdmalog` command."""

import sys

from rdmalog.cli import main

sys.exit(main())
