"""A state root on a mount without ``link()`` and ``flock`` (FUSE, blobfuse, many NFS setups).

Put this folder first on ``PYTHONPATH`` and set ``DIFFCDC_TEST_NOLINK_UNDER`` to a folder: in
that process ``os.link`` into that folder and every ``fcntl.flock`` fail with ENOTSUP, as on such
a mount. Used by the subprocess runs of tests/test_crash.py; :func:`tests.support.nolink.disable` is the
same for the test process itself.
"""

import os

if os.environ.get("DIFFCDC_TEST_NOLINK_UNDER"):
    from tests.support.nolink import disable

    disable(os.environ["DIFFCDC_TEST_NOLINK_UNDER"])
