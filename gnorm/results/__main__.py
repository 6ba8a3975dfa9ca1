"""``python -m gnorm.results``."""
import sys

from gnorm.results.summary import main

sys.exit(main())
