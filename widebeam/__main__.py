"""`python -m widebeam` is the `widebeam` command."""

import sys

from widebeam.cli import main

sys.exit(main())
