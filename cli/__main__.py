"""`python -m vak_context.cli`: the `vak` command."""

from vak_context.cli.main import main

raise SystemExit(main())
