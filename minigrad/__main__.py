"""``python -m minigrad``: the same as the ``minigrad`` command."""

from minigrad.apps.cli import main

raise SystemExit(main())
