"""``python -m diffcdc.cli``: the same as the ``diffcdc`` command."""

import sys

from diffcdc.cli.main import main

sys.exit(main())
