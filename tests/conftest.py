import os
from pathlib import Path

import pytest

# The tests read datasets from the offline mirror when one lies beside the
# checkout (as on CI); a user's own GNORM_DATA_MIRROR wins.
_MIRROR = Path(__file__).resolve().parents[1].parent / "shared" / "data"
if "GNORM_DATA_MIRROR" not in os.environ and _MIRROR.is_dir():
    os.environ["GNORM_DATA_MIRROR"] = str(_MIRROR)

MIRROR = os.environ.get("GNORM_DATA_MIRROR")
# Tests that read real datasets: `from conftest import MIRROR, needs_mirror`.
needs_mirror = pytest.mark.skipif(
    not MIRROR or not Path(MIRROR).is_dir(),
    reason="needs the offline dataset mirror (GNORM_DATA_MIRROR)")
