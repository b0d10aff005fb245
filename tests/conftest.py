"""Every report a test makes has its invariants checked strictly (doctor/findings/invariants.py): a report that
contradicts itself raises instead of carrying a note, here and in the scripts the tests run as subprocesses."""

import os

os.environ["GPUFEED_STRICT_REPORTS"] = "1"
