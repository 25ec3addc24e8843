"""A stand-in host process for test_keys.py: started as a host is (``python -m
tests.unit.keys_host OUT --keys-fd N``), it reads its handover from the inherited descriptor and
writes to OUT what it was given: the session id, and for each key its name and a BLAKE2b digest
of it (never the key), so the test can compare them with the run's without a key on disk."""

import hashlib
import json
import sys
from pathlib import Path

from harness.running import keys


def main(argv: list[str]) -> int:
    """Read the handover named by ``--keys-fd`` and record what it holds in ``argv[0]``."""
    out, flag, fd = argv
    assert flag == keys.FLAG
    session = keys.read_fd(int(fd))
    Path(out).write_text(json.dumps({
        "session_id": session.session_id,
        "keys": {n: hashlib.blake2b(session.key(n)).hexdigest() for n in session.holds()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
