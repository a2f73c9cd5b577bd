"""``python -m lite_ppo.cli COMMAND ...``: the ``lite-ppo`` command (``torchrun`` and ``sweep`` start it so)."""

import sys

from lite_ppo.cli.commands import main

sys.exit(main())
