"""``python -m interp`` (and ``torchrun ... -m interp``): the ``interp`` command."""

import sys

from interp.cli import main

if __name__ == "__main__":
    sys.exit(main())
