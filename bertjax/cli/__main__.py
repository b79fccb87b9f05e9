"""`python -m bertjax.cli ...` is `bertjax ...`."""

import sys

from bertjax.cli.main import main

sys.exit(main())
