"""``python -m tui.core.proxy``: the disaggregated prefill/decode proxy as a process (``tui.core.proxy.main``)."""

import sys

from tui.core.proxy.main import main

sys.exit(main())
