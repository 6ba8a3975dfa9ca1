import os
from pathlib import Path

# The tests read datasets from the offline mirror when one lies beside the
# checkout (as on CI); a user's own GNORM_DATA_MIRROR wins.
_MIRROR = Path(__file__).resolve().parents[1].parent / "shared" / "data"
if "GNORM_DATA_MIRROR" not in os.environ and _MIRROR.is_dir():
    os.environ["GNORM_DATA_MIRROR"] = str(_MIRROR)
