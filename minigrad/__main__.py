"""``python -m minigrad``: the same as the ``minigrad`` command."""

from minigrad.cli import main

raise SystemExit(main())
