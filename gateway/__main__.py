"""`python -m gateway` is the `rdmalog` command."""

import sys

from gateway.cli import main

sys.exit(main())
