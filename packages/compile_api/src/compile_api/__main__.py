"""``python -m compile_api`` runs the demo."""

import sys

from .demo import main

sys.exit(main())
